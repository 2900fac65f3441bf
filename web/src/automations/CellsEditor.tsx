import type { Field } from "../api";
import { newCell, type CellForm } from "./model";

/** The cells an update_row or create_row action writes: a value, or a copy of a field of the triggering row. */
export function CellsEditor(p: {
  label: string;
  cells: CellForm[];
  /** The fields written to; undefined while they load. */
  target: Field[] | undefined;
  /** The triggering table's fields, for copies. */
  source: Field[];
  allowCopy: boolean;
  errorFor: (field: string) => string | undefined;
  onChange: (cells: CellForm[]) => void;
}) {
  const set = (i: number, patch: Partial<CellForm>) => p.onChange(p.cells.map((c, j) => (j === i ? { ...c, ...patch } : c)));
  if (!p.target) return <p className="muted small">Loading the table’s fields…</p>;
  const target = p.target;
  return (
    <div className="auto-cells">
      {p.cells.map((c, i) => {
        const f = target.find((x) => x.id === c.field);
        const n = `${p.label} cell ${i + 1}`;
        const err = c.field ? p.errorFor(c.field) : undefined;
        return (
          <div key={c.key} className="auto-line-wrap">
            <div className="auto-line">
              <select aria-label={`${n} field`} value={c.field} onChange={(e) => set(i, { field: e.target.value, value: "" })}>
                <option value="">Field…</option>
                {target.map((x) => (
                  <option key={x.id} value={x.id}>
                    {x.name}
                  </option>
                ))}
              </select>
              {p.allowCopy && (
                <select aria-label={`${n} source`} value={c.mode} onChange={(e) => set(i, { mode: e.target.value as CellForm["mode"] })}>
                  <option value="value">set to</option>
                  <option value="copy">copy from</option>
                </select>
              )}
              {c.mode === "copy" && p.allowCopy ? (
                <select aria-label={`${n} copied field`} value={c.copy} onChange={(e) => set(i, { copy: e.target.value })}>
                  <option value="">Field of the row…</option>
                  {p.source.map((x) => (
                    <option key={x.id} value={x.id}>
                      {x.name}
                    </option>
                  ))}
                </select>
              ) : (
                <ValueInput field={f} label={`${n} value`} value={c.value} onChange={(value) => set(i, { value })} />
              )}
              <button type="button" className="btn ghost small" aria-label={`Remove ${n}`} onClick={() => p.onChange(p.cells.filter((_, j) => j !== i))}>
                Remove
              </button>
            </div>
            {err && <p className="field-error">{err}</p>}
          </div>
        );
      })}
      <button type="button" className="btn small" onClick={() => p.onChange([...p.cells, newCell()])}>
        Add cell
      </button>
    </div>
  );
}

function ValueInput({ field, label, value, onChange }: { field: Field | undefined; label: string; value: string; onChange: (v: string) => void }) {
  if (field?.type === "checkbox" || field?.type === "single_select") {
    const choices = field.type === "checkbox" ? ["true", "false"] : (field.options.choices ?? []);
    return (
      <select aria-label={label} value={value} onChange={(e) => onChange(e.target.value)}>
        <option value="">(empty)</option>
        {choices.map((c) => (
          <option key={c} value={c}>
            {c}
          </option>
        ))}
      </select>
    );
  }
  const hint = field?.type === "multi_select" || field?.type === "link" ? "Comma separated" : field?.type === "date" ? "YYYY-MM-DD" : "Value (empty clears)";
  return <input aria-label={label} value={value} placeholder={hint} onChange={(e) => onChange(e.target.value)} />;
}
