import { useCallback, useEffect, useState } from "react";
import type { Api, Automation, Field, TableSummary } from "../api";
import { messageOf } from "../messages";

const aborted = (signal?: AbortSignal) => signal?.aborted === true;

/** A table's automations, loaded once and kept in step with what this panel saves. */
export function useAutomations(api: Api, tableId: string) {
  const [list, setList] = useState<Automation[] | null>(null);
  const [error, setError] = useState("");
  const reload = useCallback(
    async (signal?: AbortSignal) => {
      try {
        const { automations } = await api.automations(tableId, signal);
        setList(automations);
        setError("");
      } catch (e) {
        if (!aborted(signal)) setError(messageOf(e));
      }
    },
    [api, tableId],
  );
  useEffect(() => {
    const ac = new AbortController();
    void reload(ac.signal);
    return () => ac.abort();
  }, [reload]);
  // Secrets are shown once, by the notice that receives them; the list never keeps one.
  const put = useCallback((a: Automation) => {
    const clean = { ...a, actions: a.actions.map(({ secret: _, ...rest }) => rest) };
    setList((l) => (l ? (l.some((x) => x.id === a.id) ? l.map((x) => (x.id === a.id ? clean : x)) : [...l, clean]) : [clean]));
  }, []);
  const drop = useCallback((id: string) => setList((l) => l && l.filter((x) => x.id !== id)), []);
  return { list, error, reload, put, drop };
}

/** The tables of an app, loaded when wanted (a create_row action picks one). */
export function useAppTables(api: Api, appId: string, wanted: boolean) {
  const [tables, setTables] = useState<TableSummary[] | null>(null);
  const [error, setError] = useState("");
  useEffect(() => {
    if (!wanted || tables) return;
    const ac = new AbortController();
    api.tables(appId).then(
      (t) => !aborted(ac.signal) && setTables(t.tables),
      (e) => !aborted(ac.signal) && setError(messageOf(e)),
    );
    return () => ac.abort();
  }, [api, appId, wanted, tables]);
  return { tables, error };
}

/** The fields of other tables, by id, loaded as they are named. */
export function useTableFields(api: Api, own: { id: string; fields: Field[] }, ids: string[]) {
  const [loaded, setLoaded] = useState<Record<string, Field[]>>({});
  const [error, setError] = useState("");
  const missing = ids.filter((id) => id && id !== own.id && !(id in loaded));
  const key = [...new Set(missing)].sort().join(",");
  useEffect(() => {
    if (!key) return;
    const ac = new AbortController();
    for (const id of key.split(",")) {
      api.table(id, ac.signal).then(
        (t) => setLoaded((m) => ({ ...m, [id]: [...t.fields].sort((a, b) => a.position - b.position) })),
        (e) => !aborted(ac.signal) && setError(messageOf(e)),
      );
    }
    return () => ac.abort();
  }, [api, key]);
  const fieldsOf = useCallback((id: string) => (id === own.id ? own.fields : loaded[id]), [own, loaded]);
  return { fieldsOf, error };
}
