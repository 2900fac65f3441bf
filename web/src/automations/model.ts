// The automation form's state, and the one place that turns it into the
// API's payload (and an automation back into a form). Errors are keyed by the
// API's own paths (name, trigger.fields, condition, actions[0].url,
// actions[1].cells.FIELD_ID), so a 422 from the server lands where the
// form's own check would have put it.

import type { ActionType, Automation, AutomationAction, AutomationEvent, AutomationInput, ErrorDetail, Field } from "../api";

export const events: { value: AutomationEvent; label: string }[] = [
  { value: "row.created", label: "A row is created" },
  { value: "row.updated", label: "A row is updated" },
  { value: "row.deleted", label: "A row is deleted" },
];

export const actionTypes: { value: ActionType; label: string }[] = [
  { value: "webhook", label: "Send a webhook" },
  { value: "update_row", label: "Update the row" },
  { value: "create_row", label: "Create a row in a table" },
];

export const ops = ["eq", "neq", "lt", "lte", "gt", "gte", "contains", "empty", "not_empty"] as const;
export type Op = (typeof ops)[number];

export const opLabels: Record<Op, string> = {
  eq: "is",
  neq: "is not",
  lt: "is less than",
  lte: "is at most",
  gt: "is greater than",
  gte: "is at least",
  contains: "contains",
  empty: "is empty",
  not_empty: "is not empty",
};

/** The operators the read API's filter takes for a field of this type. */
export function opsFor(type: Field["type"] | undefined): Op[] {
  const list = type === "multi_select" || type === "link";
  const bool = type === "checkbox";
  const text = !list && !bool && type !== "number" && type !== "datetime";
  return ops.filter((o) => {
    if (o === "contains") return text || list;
    if (o === "lt" || o === "lte" || o === "gt" || o === "gte") return !list && !bool;
    return true;
  });
}

export const needsValue = (op: Op) => op !== "empty" && op !== "not_empty";

export const maxActions = 10;
export const maxConditions = 20;
const maxURLLen = 2000;

export interface ConditionForm {
  key: string;
  field: string;
  op: Op;
  value: string;
}

export interface CellForm {
  key: string;
  field: string;
  /** value: the text typed; copy: a field of the triggering row ({{FIELD_ID}}). */
  mode: "value" | "copy";
  value: string;
  copy: string;
}

export interface ActionForm {
  key: string;
  id?: string;
  type: ActionType;
  url: string;
  disabled: boolean;
  table: string;
  cells: CellForm[];
}

export interface AutomationForm {
  name: string;
  enabled: boolean;
  event: AutomationEvent;
  /** row.updated only: fire when one of these is set; none is any field. */
  fields: string[];
  conditions: ConditionForm[];
  actions: ActionForm[];
}

/** Messages by API path; "" is a message about the whole automation. */
export type Errors = Record<string, string>;

let seq = 0;
const nextKey = () => "k" + ++seq;

export function newCondition(fields: Field[]): ConditionForm {
  const f = fields[0];
  return { key: nextKey(), field: f?.id ?? "", op: "eq", value: "" };
}

export function newCell(field = ""): CellForm {
  return { key: nextKey(), field, mode: "value", value: "", copy: "" };
}

export function newAction(type: ActionType = "webhook"): ActionForm {
  return { key: nextKey(), type, url: "", disabled: false, table: "", cells: type === "webhook" ? [] : [newCell()] };
}

export function emptyForm(): AutomationForm {
  return { name: "", enabled: true, event: "row.updated", fields: [], conditions: [], actions: [newAction()] };
}

const templateRe = /^\{\{([^{}]+)\}\}$/;

/** The text a stored cell value is edited as. */
export function cellText(v: unknown): string {
  if (v === null || v === undefined) return "";
  if (Array.isArray(v)) return v.join(", ");
  return String(v);
}

export function formOf(a: Automation): AutomationForm {
  return {
    name: a.name,
    enabled: a.enabled,
    event: a.trigger.event,
    fields: a.trigger.fields ?? [],
    conditions: a.condition.map(parseCondition),
    actions: a.actions.map((ac) => ({
      key: nextKey(),
      id: ac.id,
      type: ac.type,
      url: ac.url ?? "",
      disabled: ac.disabled ?? false,
      table: ac.table ?? "",
      cells: Object.entries(ac.cells ?? {}).map(([field, v]) => {
        const t = typeof v === "string" ? templateRe.exec(v) : null;
        return t ? { ...newCell(field), mode: "copy" as const, copy: t[1] } : { ...newCell(field), value: cellText(v) };
      }),
    })),
  };
}

/** FIELD:OP:VALUE; the value is everything after the second colon. */
export function parseCondition(s: string): ConditionForm {
  const [field = "", op = "eq", ...rest] = s.split(":");
  return { key: nextKey(), field, op: (ops as readonly string[]).includes(op) ? (op as Op) : "eq", value: rest.join(":") };
}

export function formatCondition(c: Pick<ConditionForm, "field" | "op" | "value">): string {
  return `${c.field}:${c.op}:${needsValue(c.op) ? c.value : ""}`;
}

/** What a webhook URL lacks, as the server checks it, or "". */
export function urlProblem(s: string): string {
  if (!s) return "a webhook needs a URL";
  if (s.length > maxURLLen) return `a URL has at most ${maxURLLen} characters`;
  let u: URL;
  try {
    u = new URL(s);
  } catch {
    return "the URL is an absolute http or https URL";
  }
  if ((u.protocol !== "http:" && u.protocol !== "https:") || !u.hostname) return "the URL is an absolute http or https URL";
  if (u.username || u.password) return "the URL may not carry a user or password";
  return "";
}

/** A typed cell value as the API takes it for a field of this type. */
export function cellValue(f: Field | undefined, text: string): { value?: unknown; problem?: string } {
  const s = f?.type === "long_text" ? text : text.trim();
  if (s === "") return { value: null };
  switch (f?.type) {
    case "number": {
      const n = Number(s);
      return Number.isFinite(n) ? { value: n } : { problem: `“${s}” is not a number` };
    }
    case "checkbox":
      if (s === "true" || s === "false") return { value: s === "true" };
      return { problem: "a checkbox is true or false" };
    case "multi_select":
    case "link":
      return { value: s.split(",").map((x) => x.trim()).filter(Boolean) };
    case "single_select": {
      const choices = f?.options.choices;
      return choices && !choices.includes(s) ? { problem: `“${s}” is not one of the choices` } : { value: s };
    }
    default:
      return { value: s };
  }
}

export interface PayloadContext {
  /** The fields of the table the automation belongs to. */
  fields: Field[];
  /** The fields of another table of the app, once loaded (create_row). */
  fieldsOf: (table: string) => Field[] | undefined;
}

/**
 * The API payload of a form, and what is wrong with it. The payload is sent
 * only when there are no errors; the server checks everything again.
 */
export function toPayload(form: AutomationForm, ctx: PayloadContext): { input: AutomationInput; errors: Errors } {
  const errors: Errors = {};
  const bad = (path: string, msg: string) => {
    if (!(path in errors)) errors[path] = msg;
  };
  const name = form.name.trim();
  if (name.length < 1 || [...name].length > 200) bad("name", "a name has 1 to 200 characters");

  const deleted = form.event === "row.deleted";
  const trigger: AutomationInput["trigger"] = { event: form.event };
  if (form.event === "row.updated" && form.fields.length > 0) trigger.fields = [...form.fields];

  const condition: string[] = [];
  if (!deleted) {
    if (form.conditions.length > maxConditions) bad("condition", `at most ${maxConditions} conditions`);
    form.conditions.forEach((c, i) => {
      const f = ctx.fields.find((x) => x.id === c.field);
      const at = `condition[${i}]`;
      if (!f) return bad(at, "choose a field");
      if (!opsFor(f.type).includes(c.op)) return bad(at, `“${opLabels[c.op]}” does not apply to a ${f.type.replace("_", " ")} field`);
      if (needsValue(c.op) && c.value === "") return bad(at, "give a value to compare with");
      if (needsValue(c.op) && (f.type === "number" || f.type === "checkbox")) {
        const v = cellValue(f, c.value);
        if (v.problem) return bad(at, v.problem);
      }
      condition.push(formatCondition(c));
    });
  }

  if (form.actions.length < 1 || form.actions.length > maxActions) bad("actions", `an automation has 1 to ${maxActions} actions`);
  const actions = form.actions.map((a, i) => actionPayload(a, i, deleted, ctx, bad));

  return { input: { name, enabled: form.enabled, trigger, condition, actions }, errors };
}

function actionPayload(a: ActionForm, i: number, deleted: boolean, ctx: PayloadContext, bad: (path: string, msg: string) => void): AutomationAction {
  const at = `actions[${i}]`;
  const out: AutomationAction = { type: a.type };
  if (a.id) out.id = a.id;
  if (a.type === "webhook") {
    const url = a.url.trim();
    const p = urlProblem(url);
    if (p) bad(at + ".url", p);
    out.url = url;
    if (a.disabled) out.disabled = true;
    return out;
  }
  let target: Field[] | undefined = ctx.fields;
  if (a.type === "update_row" && deleted) bad(at, "a row.deleted trigger has no row to update");
  if (a.type === "create_row") {
    if (!a.table) bad(at + ".table", "choose the table to write to");
    else out.table = a.table;
    target = a.table ? ctx.fieldsOf(a.table) : undefined;
  }
  if (a.cells.length === 0) bad(at + ".cells", "give at least one cell to write");
  const cells: Record<string, unknown> = {};
  for (const c of a.cells) {
    if (!c.field) {
      bad(at + ".cells", "choose a field for every cell");
      continue;
    }
    const where = `${at}.cells.${c.field}`;
    if (c.field in cells) bad(where, "this field is written twice");
    if (c.mode === "copy") {
      if (deleted) bad(where, "a row.deleted trigger has no cells to copy");
      else if (!ctx.fields.some((f) => f.id === c.copy)) bad(where, "choose the field to copy");
      cells[c.field] = `{{${c.copy}}}`;
      continue;
    }
    const v = cellValue(
      target?.find((f) => f.id === c.field),
      c.value,
    );
    if (v.problem) bad(where, v.problem);
    cells[c.field] = v.value ?? null;
  }
  out.cells = cells;
  return out;
}

/** The server's 422 details as form errors. */
export function errorsOf(details: ErrorDetail[], message: string): Errors {
  const out: Errors = {};
  for (const d of details) {
    const k = d.field ?? "";
    out[k] = out[k] ? `${out[k]}; ${d.message}` : d.message;
  }
  if (Object.keys(out).length === 0) out[""] = message;
  return out;
}

/** A person's words for an API path: "Action 2, cell “Status”". */
export function pathLabel(path: string, fieldName: (id: string) => string): string {
  if (path === "") return "Automation";
  if (path === "name") return "Name";
  if (path.startsWith("trigger.fields")) return "Trigger fields";
  if (path.startsWith("trigger")) return "Trigger";
  const cond = /^condition(?:\[(\d+)\])?/.exec(path);
  if (cond) return cond[1] === undefined ? "Conditions" : `Condition ${Number(cond[1]) + 1}`;
  const act = /^actions(?:\[(\d+)\](?:\.(\w+)(?:\.(.+))?)?)?$/.exec(path);
  if (!act) return path;
  if (act[1] === undefined) return "Actions";
  const n = `Action ${Number(act[1]) + 1}`;
  if (act[2] === "cells" && act[3]) return `${n}, cell “${fieldName(act[3])}”`;
  if (act[2] === "url") return `${n}, URL`;
  if (act[2]) return `${n}, ${act[2]}`;
  return n;
}

/** Secrets the answer shows, by webhook URL: only the answer that made a webhook action has one. */
export function shownSecrets(a: Automation): { url: string; secret: string }[] {
  return a.actions.filter((x) => x.type === "webhook" && x.secret).map((x) => ({ url: x.url ?? "", secret: x.secret! }));
}

export function describeTrigger(a: Pick<Automation, "trigger">, fieldName: (id: string) => string): string {
  const e = events.find((x) => x.value === a.trigger.event)?.label ?? a.trigger.event;
  const fs = a.trigger.fields ?? [];
  return fs.length ? `${e} (${fs.map(fieldName).join(", ")})` : e;
}
