// The table view's hooks: re-rendering once a frame, objects it owns (the
// row window, the saver), its notices, and the live feed of its table.
import { useCallback, useEffect, useRef, useState, type DependencyList } from "react";
import type { Api, Row } from "../api";
import { LiveFeed, toFetch, type LiveState } from "../live";
import type { RowWindow } from "../rows";

/** Re-render at most once a frame, however many changes arrive. */
export function useFrameTick(): [number, () => void] {
  const [tick, setTick] = useState(0);
  const queued = useRef(false);
  const bump = useCallback(() => {
    if (queued.current) return;
    queued.current = true;
    requestAnimationFrame(() => {
      queued.current = false;
      setTick((t) => t + 1);
    });
  }, []);
  return [tick, bump];
}

/**
 * An object the component owns while deps stay the same. It is made in an
 * effect, so every one made is also closed (React may run an effect twice,
 * and may throw a memoized value away without telling); it is null until the
 * first one is made.
 */
export function useOwned<T extends { close(): void }>(make: () => T, deps: DependencyList): T | null {
  const [owned, setOwned] = useState<T | null>(null);
  useEffect(() => {
    const v = make();
    setOwned(v);
    return () => v.close();
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);
  return owned;
}

export interface Notice {
  id: number;
  kind: "conflict" | "error" | "info";
  text: string;
  rowId?: string;
  fieldId?: string;
  mine?: unknown;
}

/** The last five notices; a new one about a cell replaces the one before it, and an info notice goes after 5 s. */
export function useNotices() {
  const [notices, setNotices] = useState<Notice[]>([]);
  const seq = useRef(0);
  const dismiss = useCallback((id: number) => setNotices((ns) => ns.filter((x) => x.id !== id)), []);
  const notify = useCallback(
    (n: Omit<Notice, "id">) => {
      const id = ++seq.current;
      setNotices((ns) => [...ns.filter((x) => !(n.rowId && x.rowId === n.rowId && x.fieldId === n.fieldId)), { ...n, id }].slice(-5));
      if (n.kind === "info") setTimeout(() => dismiss(id), 5000);
    },
    [dismiss],
  );
  return { notices, notify, dismiss };
}

/** The row a person is editing, and other people's news of it, held back until the edit ends. */
export interface EditHold {
  row: string | null;
  news: Map<string, Row>;
}

/**
 * Watches the table's events while mounted: rows changed elsewhere refresh in
 * place (only those the window holds, in one request), new rows appear when
 * the end is loaded, deleted ones go; a resync calls onResync. The row being
 * edited is not changed under the cursor: its news waits in hold. Returns the
 * connection's state.
 */
export function useLiveRows(
  api: Api,
  tableId: string,
  win: RowWindow | null,
  hold: EditHold,
  notify: (n: Omit<Notice, "id">) => void,
  onResync: () => void,
): LiveState {
  const [state, setState] = useState<LiveState>("connecting");
  const winRef = useRef(win);
  winRef.current = win;
  const resync = useRef(onResync);
  resync.current = onResync;
  useEffect(() => {
    const feed = new LiveFeed(api.eventsUrl(tableId), {
      onState: setState,
      onRows: (e) => {
        const w = winRef.current;
        if (!w) return; // the first window is being made: it loads the rows afresh
        if (e.deleted?.length) w.remove(e.deleted);
        for (const ids of toFetch(e, (id) => w.byID(id) !== undefined)) {
          api
            .rowsByIds(tableId, ids)
            .then((page) => {
              const fresh: Row[] = [];
              for (const row of page.rows) {
                const held = w.byID(row.id);
                if (held && held.version >= row.version) continue;
                if (hold.row === row.id) {
                  hold.news.set(row.id, row);
                  notify({ kind: "info", rowId: row.id, text: "Someone else changed the row you are editing; it shows their change when you finish." });
                } else if (held) w.update(row);
                else fresh.push(row);
              }
              if (fresh.length) w.append(fresh);
            })
            .catch(() => {
              /* the next event, or a resync, brings it */
            });
        }
      },
      onResync: () => resync.current(),
    });
    return () => feed.close();
  }, [api, tableId, hold, notify]);
  return state;
}
