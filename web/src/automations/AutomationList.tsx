import type { Automation, AutomationAction, Field } from "../api";
import { describeTrigger, needsValue, opLabels, parseCondition } from "./model";

export function AutomationList(p: {
  automations: Automation[];
  fields: Field[];
  canEdit: boolean;
  busy: string | null;
  onToggle: (a: Automation, enabled: boolean) => void;
  onEdit: (a: Automation) => void;
  onRuns: (a: Automation) => void;
  onDelete: (a: Automation) => void;
}) {
  const fieldName = (id: string) => p.fields.find((f) => f.id === id)?.name ?? id;
  if (p.automations.length === 0)
    return <p className="muted">No automations on this table yet.{p.canEdit ? " Create one to send a webhook or write rows when rows change." : ""}</p>;
  return (
    <ul className="auto-list">
      {p.automations.map((a) => (
        <li key={a.id} className="auto-item">
          <div className="auto-line">
            <h3>{a.name}</h3>
            <span className={"auto-state " + (a.enabled ? "on" : "off")}>{a.enabled ? "Enabled" : "Disabled"}</span>
            <span className="spacer" />
            {p.canEdit && (
              <button
                role="switch"
                aria-checked={a.enabled}
                aria-label={`Enabled: ${a.name}`}
                className={"btn small switch" + (a.enabled ? " on" : "")}
                disabled={p.busy === a.id}
                onClick={() => p.onToggle(a, !a.enabled)}
              >
                {a.enabled ? "Turn off" : "Turn on"}
              </button>
            )}
          </div>
          <p className="small">
            {describeTrigger(a, fieldName)}
            {a.condition.length > 0 && <> · if {a.condition.map((c) => conditionText(c, fieldName)).join(" and ")}</>}
          </p>
          <ul className="small muted auto-actions">
            {a.actions.map((ac, i) => (
              <li key={ac.id ?? i}>{actionText(ac, fieldName)}</li>
            ))}
          </ul>
          <div className="auto-line">
            <button className="btn small" onClick={() => p.onRuns(a)} aria-label={`Run log of ${a.name}`}>
              Run log
            </button>
            {p.canEdit && (
              <>
                <button className="btn small" onClick={() => p.onEdit(a)} aria-label={`Edit ${a.name}`}>
                  Edit
                </button>
                <button className="btn small ghost danger" onClick={() => p.onDelete(a)} aria-label={`Delete ${a.name}`}>
                  Delete
                </button>
              </>
            )}
          </div>
        </li>
      ))}
    </ul>
  );
}

function conditionText(s: string, fieldName: (id: string) => string): string {
  const c = parseCondition(s);
  return `${fieldName(c.field)} ${opLabels[c.op]}${needsValue(c.op) ? ` “${c.value}”` : ""}`;
}

function actionText(a: AutomationAction, fieldName: (id: string) => string): string {
  const cells = Object.keys(a.cells ?? {});
  switch (a.type) {
    case "webhook":
      return `Webhook to ${a.url}${a.disabled ? " (paused: the receiver answered 410 Gone)" : ""}`;
    case "update_row":
      return `Update the row: ${cells.map(fieldName).join(", ")}`;
    case "create_row":
      return `Create a row in a table of this app (${cells.length} cell${cells.length === 1 ? "" : "s"})`;
  }
}
