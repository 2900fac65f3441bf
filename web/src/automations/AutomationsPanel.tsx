import { useEffect, useRef, useState } from "react";
import { ApiError, type Api, type Automation, type Field, type Table } from "../api";
import { messageOf } from "../messages";
import { AutomationEditor } from "./AutomationEditor";
import { AutomationList } from "./AutomationList";
import { useAutomations } from "./hooks";
import { shownSecrets } from "./model";
import { RunLog } from "./RunLog";
import { SecretNotice } from "./SecretNotice";

type View = { kind: "list" } | { kind: "new" } | { kind: "edit"; a: Automation } | { kind: "runs"; a: Automation };

/**
 * A table's automations, beside its grid: the list, the editor, the run
 * log. Editors (and owners) change them; viewers see them and their runs.
 */
export function AutomationsPanel(p: { api: Api; table: Table; fields: Field[]; role: string | undefined; onClose: () => void }) {
  const { api } = p;
  const table = { ...p.table, fields: p.fields };
  const canEdit = p.role === "editor" || p.role === "owner";
  const { list, error: loadError, put, drop } = useAutomations(api, table.id);
  const [view, setView] = useState<View>({ kind: "list" });
  const [secrets, setSecrets] = useState<{ url: string; secret: string }[]>([]);
  const [error, setError] = useState("");
  const [busy, setBusy] = useState<string | null>(null);
  const heading = useRef<HTMLHeadingElement>(null);

  // Focus follows the view, and goes back where it came from on close.
  useEffect(() => {
    const before = document.activeElement as HTMLElement | null;
    return () => before?.focus?.();
  }, []);
  useEffect(() => {
    if (view.kind !== "new" && view.kind !== "edit") heading.current?.focus();
  }, [view]);

  const act = async (id: string, fn: () => Promise<void>) => {
    setError("");
    setBusy(id);
    try {
      await fn();
    } catch (e) {
      setError(e instanceof ApiError && e.status === 403 ? `Your role in this realm may read automations but not change them (${e.message}).` : messageOf(e));
    } finally {
      setBusy(null);
    }
  };
  const toggle = (a: Automation, enabled: boolean) => act(a.id, async () => put(await api.patchAutomation(table.id, a.id, { enabled })));
  const remove = (a: Automation) =>
    act(a.id, async () => {
      if (!confirm(`Delete the automation “${a.name}” and its run log?`)) return;
      await api.deleteAutomation(table.id, a.id);
      drop(a.id);
    });
  const saved = (a: Automation) => {
    const shown = shownSecrets(a);
    if (shown.length) setSecrets(shown);
    put(a);
    setView({ kind: "list" });
  };

  const title = view.kind === "new" ? "New automation" : view.kind === "edit" ? `Edit “${view.a.name}”` : view.kind === "runs" ? `Run log: ${view.a.name}` : "Automations";
  const back = () => setView({ kind: "list" });
  const onKey = (e: React.KeyboardEvent) => {
    if (e.key !== "Escape" || e.defaultPrevented) return;
    e.preventDefault();
    if (view.kind === "list") p.onClose();
    else back();
  };

  return (
    <aside className="drawer card" aria-labelledby="automations-title" onKeyDown={onKey}>
      <div className="drawer-head">
        {view.kind !== "list" && (
          <button className="btn ghost small" onClick={back}>
            ← All automations
          </button>
        )}
        <h2 id="automations-title" ref={heading} tabIndex={-1}>
          {title}
        </h2>
        <span className="spacer" />
        <button className="btn ghost small" onClick={p.onClose} aria-label="Close automations">
          Close
        </button>
      </div>
      <div className="drawer-body">
        {secrets.length > 0 && <SecretNotice secrets={secrets} onDone={() => setSecrets([])} />}
        {(error || loadError) && (
          <p className="error" role="alert">
            {error || `Automations could not be loaded: ${loadError}`}
          </p>
        )}
        {view.kind === "list" && (
          <>
            {!canEdit && p.role && <p className="muted small">You can see this table’s automations and their runs; editors change them.</p>}
            {canEdit && (
              <button className="btn primary" onClick={() => setView({ kind: "new" })}>
                New automation
              </button>
            )}
            {list === null && !loadError && <p className="muted">Loading…</p>}
            {list && (
              <AutomationList
                automations={list}
                fields={table.fields}
                canEdit={canEdit}
                busy={busy}
                onToggle={(a, on) => void toggle(a, on)}
                onEdit={(a) => setView({ kind: "edit", a })}
                onRuns={(a) => setView({ kind: "runs", a })}
                onDelete={(a) => void remove(a)}
              />
            )}
          </>
        )}
        {(view.kind === "new" || view.kind === "edit") && (
          <AutomationEditor api={api} table={table} automation={view.kind === "edit" ? view.a : undefined} onSaved={saved} onCancel={back} />
        )}
        {view.kind === "runs" && <RunLog api={api} tableId={table.id} automation={view.a} canEdit={canEdit} />}
      </div>
    </aside>
  );
}
