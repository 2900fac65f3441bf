import type { Field } from "../api";
import { maxConditions, needsValue, newCondition, opLabels, opsFor, type ConditionForm, type Errors, type Op } from "./model";

/** The condition: filters in the read API's syntax, all of which must hold for a row. */
export function ConditionsEditor(p: { conditions: ConditionForm[]; fields: Field[]; errors: Errors; onChange: (c: ConditionForm[]) => void }) {
  const set = (i: number, patch: Partial<ConditionForm>) => p.onChange(p.conditions.map((c, j) => (j === i ? { ...c, ...patch } : c)));
  const setField = (i: number, field: string) => {
    const allowed = opsFor(p.fields.find((f) => f.id === field)?.type);
    set(i, { field, op: allowed.includes(p.conditions[i].op) ? p.conditions[i].op : "eq" });
  };
  return (
    <fieldset className="auto-section">
      <legend>Condition</legend>
      {p.conditions.length === 0 && <p className="muted small">Every row the trigger fires for. Add a condition to narrow it; all conditions must hold.</p>}
      {p.conditions.map((c, i) => {
        const f = p.fields.find((x) => x.id === c.field);
        const n = `Condition ${i + 1}`;
        const err = p.errors[`condition[${i}]`];
        return (
          <div key={c.key} className="auto-line-wrap">
            <div className="auto-line">
              <select aria-label={`${n} field`} value={c.field} onChange={(e) => setField(i, e.target.value)}>
                {!f && <option value="">Field…</option>}
                {p.fields.map((x) => (
                  <option key={x.id} value={x.id}>
                    {x.name}
                  </option>
                ))}
              </select>
              <select aria-label={`${n} operator`} value={c.op} onChange={(e) => set(i, { op: e.target.value as Op })}>
                {opsFor(f?.type).map((o) => (
                  <option key={o} value={o}>
                    {opLabels[o]}
                  </option>
                ))}
              </select>
              {needsValue(c.op) &&
                (f?.type === "checkbox" ? (
                  <select aria-label={`${n} value`} value={c.value} onChange={(e) => set(i, { value: e.target.value })}>
                    <option value="">Value…</option>
                    <option value="true">true</option>
                    <option value="false">false</option>
                  </select>
                ) : (
                  <input aria-label={`${n} value`} value={c.value} placeholder="Value" onChange={(e) => set(i, { value: e.target.value })} />
                ))}
              <button type="button" className="btn ghost small" aria-label={`Remove ${n}`} onClick={() => p.onChange(p.conditions.filter((_, j) => j !== i))}>
                Remove
              </button>
            </div>
            {err && <p className="field-error">{err}</p>}
          </div>
        );
      })}
      {p.errors.condition && <p className="field-error">{p.errors.condition}</p>}
      <button type="button" className="btn small" disabled={p.conditions.length >= maxConditions} onClick={() => p.onChange([...p.conditions, newCondition(p.fields)])}>
        Add condition
      </button>
    </fieldset>
  );
}
