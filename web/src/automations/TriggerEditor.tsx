import type { AutomationEvent, Field } from "../api";
import { events } from "./model";

/** When an automation runs: the event, and for updates the fields that count. */
export function TriggerEditor(p: {
  event: AutomationEvent;
  fields: string[];
  tableFields: Field[];
  error?: string;
  onChange: (event: AutomationEvent, fields: string[]) => void;
}) {
  const toggle = (id: string, on: boolean) => p.onChange(p.event, on ? [...p.fields, id] : p.fields.filter((x) => x !== id));
  return (
    <fieldset className="auto-section">
      <legend>Trigger</legend>
      <label className="auto-field">
        When
        <select value={p.event} onChange={(e) => p.onChange(e.target.value as AutomationEvent, [])}>
          {events.map((e) => (
            <option key={e.value} value={e.value}>
              {e.label} ({e.value})
            </option>
          ))}
        </select>
      </label>
      {p.event === "row.updated" && (
        <fieldset className="auto-fields">
          <legend className="small muted">Only when one of these fields is set (none ticked: any field)</legend>
          {p.tableFields.map((f) => (
            <label key={f.id} className="auto-check">
              <input type="checkbox" checked={p.fields.includes(f.id)} onChange={(e) => toggle(f.id, e.target.checked)} />
              {f.name}
            </label>
          ))}
        </fieldset>
      )}
      {p.error && <p className="field-error">{p.error}</p>}
    </fieldset>
  );
}
