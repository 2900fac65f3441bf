import { useCallback, useEffect, useState } from "react";
import { messageOf } from "../messages";

/**
 * What a settings page shows: fetched on mount (and every pollMs when
 * given), with the last error; act runs a change, then fetches again, and
 * keeps the change's error for the page to show.
 */
export function useResource<T>(fetch: () => Promise<T>, pollMs?: number) {
  const [value, setValue] = useState<T | null>(null);
  const [error, setError] = useState("");
  const reload = useCallback(async () => {
    try {
      setValue(await fetch());
      setError("");
    } catch (e) {
      setError(messageOf(e));
    }
  }, [fetch]);
  useEffect(() => {
    void reload();
    if (!pollMs) return;
    const t = setInterval(() => void reload(), pollMs);
    return () => clearInterval(t);
  }, [reload, pollMs]);
  const act = useCallback(
    async (fn: () => Promise<unknown>) => {
      setError("");
      try {
        await fn();
      } catch (e) {
        setError(messageOf(e));
        return;
      }
      await reload();
    },
    [reload],
  );
  return { value, error, reload, act };
}
