// Small parts of the table view: the live badge, the chips of the current
// query, and the notices' list.
import type { Field, RowQuery } from "../api";
import type { LiveState } from "../live";
import type { Notice } from "./hooks";

const liveTitle: Record<LiveState, string> = {
  connecting: "Connecting to live updates",
  live: "Other people's edits appear as they are made",
  reconnecting: "Live updates lost; reconnecting (the table reloads when they are back)",
};

/** The live feed's state; it reconnects by itself. */
export function LiveBadge({ state }: { state: LiveState }) {
  return (
    <span className={"live live-" + state} data-live={state} role="status" aria-label={"Live updates: " + state} title={liveTitle[state]}>
      {state === "live" ? "● Live" : state === "connecting" ? "Connecting…" : "Reconnecting…"}
    </span>
  );
}

/** The sort, filters and search in effect, each removable. */
export function QueryChips({ query, fields, onChange }: { query: RowQuery; fields: Field[]; onChange: (f: (q: RowQuery) => RowQuery) => void }) {
  const sortField = query.sort ? fields.find((f) => f.id === query.sort!.replace(/^-/, "")) : undefined;
  const fieldName = (id: string) => fields.find((f) => f.id === id)?.name ?? id;
  if (!sortField && !query.filter?.length && !query.q) return null;
  return (
    <div className="chips">
      {sortField && (
        <span className="chip">
          Sorted by {sortField.name} {query.sort!.startsWith("-") ? "↓" : "↑"}
          <button aria-label="Remove sort" onClick={() => onChange((q) => ({ ...q, sort: undefined }))}>
            ×
          </button>
        </span>
      )}
      {query.filter?.map((f) => {
        const [fid, op, ...v] = f.split(":");
        return (
          <span className="chip" key={f}>
            {fieldName(fid)} {op.replace("_", " ")} {v.join(":")}
            <button aria-label="Remove filter" onClick={() => onChange((q) => ({ ...q, filter: q.filter?.filter((x) => x !== f) }))}>
              ×
            </button>
          </span>
        );
      })}
      {query.q && <span className="chip">Search: {query.q}</span>}
    </div>
  );
}

/** The notices; a conflict offers to keep theirs or use mine. */
export function NoticeList({ notices, onUseMine, onDismiss }: { notices: Notice[]; onUseMine: (n: Notice) => void; onDismiss: (n: Notice) => void }) {
  return (
    <>
      {notices.map((n) => (
        <div key={n.id} className={"notice " + n.kind}>
          <p>{n.text}</p>
          <div className="notice-actions">
            {n.kind === "conflict" && n.rowId && n.fieldId && (
              <button className="btn small primary" onClick={() => onUseMine(n)}>
                Use mine
              </button>
            )}
            <button className="btn small" onClick={() => onDismiss(n)}>
              {n.kind === "conflict" ? "Keep theirs" : "Dismiss"}
            </button>
          </div>
        </div>
      ))}
    </>
  );
}
