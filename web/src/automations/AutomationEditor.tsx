import { useState } from "react";
import { ApiError, type Api, type Automation, type Table } from "../api";
import { messageOf } from "../messages";
import { ActionEditor } from "./ActionEditor";
import { ConditionsEditor } from "./ConditionsEditor";
import { FormErrors } from "./FormErrors";
import { useAppTables, useTableFields } from "./hooks";
import { emptyForm, errorsOf, formOf, maxActions, newAction, toPayload, type ActionForm, type AutomationForm, type Errors } from "./model";
import { TriggerEditor } from "./TriggerEditor";

/** Create an automation (no `automation`) or change one; `onSaved` receives the server's answer, secrets and all. */
export function AutomationEditor(p: { api: Api; table: Table; automation?: Automation; onSaved: (a: Automation) => void; onCancel: () => void }) {
  const { api, table } = p;
  const [form, setForm] = useState<AutomationForm>(() => (p.automation ? formOf(p.automation) : emptyForm()));
  const [errors, setErrors] = useState<Errors>({});
  const [busy, setBusy] = useState(false);
  const wantsTables = form.actions.some((a) => a.type === "create_row");
  const { tables, error: tablesError } = useAppTables(api, table.app_id, wantsTables);
  const { fieldsOf, error: fieldsError } = useTableFields(
    api,
    table,
    form.actions.map((a) => (a.type === "create_row" ? a.table : "")),
  );
  const set = (patch: Partial<AutomationForm>) => setForm((f) => ({ ...f, ...patch }));
  const setAction = (i: number, a: ActionForm) => set({ actions: form.actions.map((x, j) => (j === i ? a : x)) });
  const deleted = form.event === "row.deleted";

  const fieldName = (id: string) => {
    for (const fs of [table.fields, ...form.actions.map((a) => (a.table ? fieldsOf(a.table) : undefined))])
      for (const f of fs ?? []) if (f.id === id) return f.name;
    return id;
  };

  const save = async (e: React.FormEvent) => {
    e.preventDefault();
    const { input, errors: mine } = toPayload(form, { fields: table.fields, fieldsOf });
    setErrors(mine);
    if (Object.keys(mine).length) return;
    setBusy(true);
    try {
      p.onSaved(p.automation ? await api.patchAutomation(table.id, p.automation.id, input) : await api.createAutomation(table.id, input));
    } catch (err) {
      setErrors(saveErrors(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <form className="auto-form" onSubmit={save} noValidate>
      <label className="auto-field">
        Name
        <input autoFocus value={form.name} maxLength={200} onChange={(e) => set({ name: e.target.value })} aria-invalid={!!errors.name} />
      </label>
      {errors.name && <p className="field-error">{errors.name}</p>}
      <label className="auto-check">
        <input type="checkbox" checked={form.enabled} onChange={(e) => set({ enabled: e.target.checked })} />
        Enabled
      </label>
      <TriggerEditor
        event={form.event}
        fields={form.fields}
        tableFields={table.fields}
        error={errors["trigger.event"] ?? errors["trigger.fields"] ?? Object.entries(errors).find(([k]) => k.startsWith("trigger.fields["))?.[1]}
        onChange={(event, fields) => set({ event, fields })}
      />
      {deleted ? (
        <p className="muted small">A row.deleted trigger takes no condition: the rows are gone.</p>
      ) : (
        <ConditionsEditor conditions={form.conditions} fields={table.fields} errors={errors} onChange={(conditions) => set({ conditions })} />
      )}
      <fieldset className="auto-section">
        <legend>Actions, in order</legend>
        {form.actions.map((a, i) => (
          <ActionEditor
            key={a.key}
            action={a}
            index={i}
            deleted={deleted}
            fields={table.fields}
            tables={tables}
            fieldsOf={fieldsOf}
            errors={errors}
            canRemove={form.actions.length > 1}
            onChange={(x) => setAction(i, x)}
            onRemove={() => set({ actions: form.actions.filter((_, j) => j !== i) })}
          />
        ))}
        {errors.actions && <p className="field-error">{errors.actions}</p>}
        <button type="button" className="btn small" disabled={form.actions.length >= maxActions} onClick={() => set({ actions: [...form.actions, newAction()] })}>
          Add action
        </button>
      </fieldset>
      {(tablesError || fieldsError) && <p className="error">{tablesError || fieldsError}</p>}
      <FormErrors errors={errors} fieldName={fieldName} />
      <div className="auto-buttons">
        <button className="btn primary" type="submit" disabled={busy}>
          {busy ? "Saving…" : p.automation ? "Save changes" : "Create automation"}
        </button>
        <button className="btn ghost" type="button" onClick={p.onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}

function saveErrors(err: unknown): Errors {
  if (err instanceof ApiError && err.status === 422) return errorsOf(err.details, err.message);
  if (err instanceof ApiError && err.status === 403)
    return { "": `Not saved: your role in this realm may read automations but not change them (${err.message}).` };
  return { "": `Not saved: ${messageOf(err)}` };
}
