import type { ActionType, Field, TableSummary } from "../api";
import { CellsEditor } from "./CellsEditor";
import { actionTypes, newCell, type ActionForm, type Errors } from "./model";

export function ActionEditor(p: {
  action: ActionForm;
  index: number;
  deleted: boolean;
  fields: Field[];
  tables: TableSummary[] | null;
  fieldsOf: (table: string) => Field[] | undefined;
  errors: Errors;
  canRemove: boolean;
  onChange: (a: ActionForm) => void;
  onRemove: () => void;
}) {
  const a = p.action;
  const label = `Action ${p.index + 1}`;
  const at = `actions[${p.index}]`;
  const set = (patch: Partial<ActionForm>) => p.onChange({ ...a, ...patch });
  const setType = (type: ActionType) =>
    // A new type is a new action: the server gives it a new id (and a webhook a new secret).
    set({ type, id: undefined, disabled: false, table: "", cells: type === "webhook" ? [] : a.cells.length ? a.cells : [newCell()] });
  const own = (k: string) => p.errors[k];
  const cellError = (field: string) => p.errors[`${at}.cells.${field}`];
  const target = a.type === "create_row" ? (a.table ? p.fieldsOf(a.table) : []) : p.fields;
  return (
    <fieldset className="auto-action">
      <legend>{label}</legend>
      <div className="auto-line">
        <select aria-label={`${label} type`} value={a.type} onChange={(e) => setType(e.target.value as ActionType)}>
          {actionTypes.map((t) => (
            <option key={t.value} value={t.value}>
              {t.label}
            </option>
          ))}
        </select>
        <span className="spacer" />
        {p.canRemove && (
          <button type="button" className="btn ghost small danger" onClick={p.onRemove} aria-label={`Remove ${label}`}>
            Remove
          </button>
        )}
      </div>
      {a.type === "webhook" && (
        <>
          <label className="auto-field">
            Webhook URL
            <input type="url" value={a.url} placeholder="https://example.com/hooks/appdor" onChange={(e) => set({ url: e.target.value })} aria-invalid={!!own(at + ".url")} />
          </label>
          {own(at + ".url") && <p className="field-error">{own(at + ".url")}</p>}
          {a.disabled && (
            <label className="auto-check warn">
              <input type="checkbox" checked={a.disabled} onChange={(e) => set({ disabled: e.target.checked })} />
              Paused: the receiver answered 410 Gone. Untick and save to send to it again.
            </label>
          )}
          {!a.id && <p className="muted small">Saving shows this webhook’s signing secret once.</p>}
        </>
      )}
      {a.type === "update_row" && p.deleted && <p className="field-error">A deleted row cannot be updated; choose another trigger or action.</p>}
      {a.type === "create_row" && (
        <label className="auto-field">
          Table to add the row to
          <select value={a.table} onChange={(e) => set({ table: e.target.value, cells: [newCell()] })}>
            <option value="">{p.tables ? "Choose a table…" : "Loading tables…"}</option>
            {(p.tables ?? []).map((t) => (
              <option key={t.id} value={t.id}>
                {t.name}
              </option>
            ))}
          </select>
        </label>
      )}
      {own(at + ".table") && <p className="field-error">{own(at + ".table")}</p>}
      {a.type !== "webhook" && (a.type === "update_row" || a.table) && (
        <CellsEditor
          label={label}
          cells={a.cells}
          target={target}
          source={p.fields}
          allowCopy={!p.deleted}
          errorFor={cellError}
          onChange={(cells) => set({ cells })}
        />
      )}
      {[own(at), own(at + ".cells"), own(at + ".type")].filter(Boolean).map((m) => (
        <p key={m} className="field-error">
          {m}
        </p>
      ))}
    </fieldset>
  );
}
