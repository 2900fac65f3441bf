import { useCallback, useEffect, useRef, useState } from "react";
import { ApiError, type Api, type AutomationRun } from "../api";
import { messageOf } from "../messages";
import { appended, refreshed, withRun, type RunList } from "./runs";

/** How often an open run log asks for new runs. */
const pollMs = 3000;

/** An automation's run log, newest first, kept fresh while it is on screen. */
export function useRuns(api: Api, tableId: string, automationId: string) {
  const [list, setList] = useState<RunList | null>(null);
  const [error, setError] = useState("");
  const [notice, setNotice] = useState("");
  const listRef = useRef(list);
  listRef.current = list;

  const refresh = useCallback(
    async (signal?: AbortSignal) => {
      try {
        const page = await api.automationRuns(tableId, automationId, null, signal);
        if (signal?.aborted) return;
        setList((l) => refreshed(l, page));
        setError("");
      } catch (e) {
        if (!signal?.aborted) setError(messageOf(e));
      }
    },
    [api, tableId, automationId],
  );

  useEffect(() => {
    const ac = new AbortController();
    let timer = 0;
    const tick = async () => {
      if (!document.hidden) await refresh(ac.signal);
      if (!ac.signal.aborted) timer = window.setTimeout(tick, pollMs);
    };
    void tick();
    return () => (ac.abort(), clearTimeout(timer));
  }, [refresh]);

  const more = useCallback(async () => {
    const l = listRef.current;
    if (!l?.cursor) return;
    try {
      const page = await api.automationRuns(tableId, automationId, l.cursor);
      setList((cur) => (cur ? appended(cur, page) : cur));
    } catch (e) {
      setError(messageOf(e));
    }
  }, [api, tableId, automationId]);

  const replay = useCallback(
    async (run: AutomationRun) => {
      setNotice("");
      try {
        const r = await api.replayRun(tableId, automationId, run.id);
        setList((cur) => (cur ? withRun(cur, r) : cur));
        setNotice("Replay queued: the failed deliveries are sent again with their webhook ids.");
      } catch (e) {
        if (e instanceof ApiError && e.status === 403) setNotice(`Not replayed: your role may read the run log but not replay runs (${e.message}).`);
        else setNotice(`Not replayed: ${messageOf(e)}`);
      }
    },
    [api, tableId, automationId],
  );

  return { list, error, notice, refresh, more, replay };
}
