import { describe, expect, it } from "vitest";
import type { Automation, Field } from "../api";
import {
  cellValue,
  emptyForm,
  errorsOf,
  formOf,
  newAction,
  newCell,
  newCondition,
  opsFor,
  parseCondition,
  pathLabel,
  shownSecrets,
  toPayload,
  urlProblem,
  type AutomationForm,
} from "./model";

const field = (id: string, name: string, type: Field["type"], options: Field["options"] = {}): Field => ({ id, name, type, options, position: 0 });
const fields = [
  field("f_name", "Name", "text"),
  field("f_amount", "Amount", "number"),
  field("f_done", "Done", "checkbox"),
  field("f_status", "Status", "single_select", { choices: ["Open", "Closed"] }),
  field("f_tags", "Tags", "multi_select", { choices: ["a", "b"] }),
];
const other = [field("g_title", "Title", "text"), field("g_count", "Count", "number")];
const ctx = { fields, fieldsOf: (t: string) => (t === "t_other" ? other : undefined) };

function form(patch: Partial<AutomationForm>): AutomationForm {
  return { ...emptyForm(), name: "Notify", ...patch };
}

describe("toPayload", () => {
  it("turns a webhook form into the API's payload", () => {
    const hook = { ...newAction("webhook"), url: " https://example.com/hook " };
    const { input, errors } = toPayload(form({ event: "row.updated", fields: ["f_status"], actions: [hook] }), ctx);
    expect(errors).toEqual({});
    expect(input).toEqual({
      name: "Notify",
      enabled: true,
      trigger: { event: "row.updated", fields: ["f_status"] },
      condition: [],
      actions: [{ type: "webhook", url: "https://example.com/hook" }],
    });
  });

  it("writes conditions in the filter syntax and drops trigger fields from other events", () => {
    const conditions = [
      { ...newCondition(fields), field: "f_status", op: "eq" as const, value: "Closed" },
      { ...newCondition(fields), field: "f_name", op: "empty" as const, value: "ignored" },
      { ...newCondition(fields), field: "f_name", op: "contains" as const, value: "a:b" },
    ];
    const hook = { ...newAction("webhook"), url: "http://127.0.0.1:9/x" };
    const { input, errors } = toPayload(form({ event: "row.created", fields: ["f_status"], conditions, actions: [hook] }), ctx);
    expect(errors).toEqual({});
    expect(input.trigger).toEqual({ event: "row.created" });
    expect(input.condition).toEqual(["f_status:eq:Closed", "f_name:empty:", "f_name:contains:a:b"]);
  });

  it("types cell values by their field, copies with templates and clears with null", () => {
    const update = {
      ...newAction("update_row"),
      cells: [
        { ...newCell("f_amount"), value: " 12.5 " },
        { ...newCell("f_done"), value: "true" },
        { ...newCell("f_tags"), value: "a, b," },
        { ...newCell("f_status"), value: "" },
        { ...newCell("f_name"), mode: "copy" as const, copy: "f_status" },
      ],
    };
    const create = { ...newAction("create_row"), table: "t_other", cells: [{ ...newCell("g_count"), value: "3" }] };
    const { input, errors } = toPayload(form({ actions: [update, create] }), ctx);
    expect(errors).toEqual({});
    expect(input.actions).toEqual([
      { type: "update_row", cells: { f_amount: 12.5, f_done: true, f_tags: ["a", "b"], f_status: null, f_name: "{{f_status}}" } },
      { type: "create_row", table: "t_other", cells: { g_count: 3 } },
    ]);
  });

  it("keeps action ids and a paused webhook's flag, so an edit keeps the secret and the pause", () => {
    const hook = { ...newAction("webhook"), id: "act_1", url: "https://example.com", disabled: true };
    expect(toPayload(form({ actions: [hook] }), ctx).input.actions).toEqual([{ id: "act_1", type: "webhook", url: "https://example.com", disabled: true }]);
  });

  it("says what is wrong, under the API's paths", () => {
    const bad = [
      { ...newAction("webhook"), url: "ftp://example.com" },
      { ...newAction("update_row"), cells: [{ ...newCell("f_amount"), value: "ten" }, { ...newCell("f_amount"), value: "1" }] },
      { ...newAction("create_row"), cells: [] },
    ];
    const conditions = [{ ...newCondition(fields), field: "f_done", op: "gt" as const, value: "true" }, { ...newCondition(fields), field: "f_name", op: "eq" as const, value: "" }];
    const { errors } = toPayload(form({ name: "  ", conditions, actions: bad }), ctx);
    expect(Object.keys(errors).sort()).toEqual(
      ["name", "condition[0]", "condition[1]", "actions[0].url", "actions[1].cells.f_amount", "actions[2].table", "actions[2].cells"].sort(),
    );
    expect(errors["actions[1].cells.f_amount"]).toMatch(/not a number/);
  });

  it("refuses what a row.deleted trigger cannot do, and drops its condition", () => {
    const update = { ...newAction("update_row"), cells: [{ ...newCell("f_name"), value: "x" }] };
    const create = { ...newAction("create_row"), table: "t_other", cells: [{ ...newCell("g_title"), mode: "copy" as const, copy: "f_name" }] };
    const cond = [{ ...newCondition(fields), field: "f_name", op: "eq" as const, value: "x" }];
    const { input, errors } = toPayload(form({ event: "row.deleted", conditions: cond, actions: [update, create] }), ctx);
    expect(input.condition).toEqual([]);
    expect(errors["actions[0]"]).toMatch(/no row to update/);
    expect(errors["actions[1].cells.g_title"]).toMatch(/no cells to copy/);
  });

  it("needs 1 to 10 actions", () => {
    expect(toPayload(form({ actions: [] }), ctx).errors.actions).toBeDefined();
    const many = Array.from({ length: 11 }, () => ({ ...newAction(), url: "https://example.com" }));
    expect(toPayload(form({ actions: many }), ctx).errors.actions).toBeDefined();
  });
});

describe("formOf", () => {
  it("reads an automation back into a form that gives the same payload", () => {
    const a: Automation = {
      id: "a1",
      table_id: "t1",
      name: "Round trip",
      enabled: false,
      trigger: { event: "row.updated", fields: ["f_amount"] },
      condition: ["f_amount:gte:10", "f_tags:contains:a"],
      actions: [
        { id: "act_w", type: "webhook", url: "https://example.com/h" },
        { id: "act_u", type: "update_row", cells: { f_tags: ["a", "b"], f_done: false, f_name: "{{f_status}}" } },
      ],
      created_at: "",
      updated_at: "",
    };
    const f = formOf(a);
    expect(f.actions[1].cells.map((c) => [c.field, c.mode, c.mode === "copy" ? c.copy : c.value])).toEqual([
      ["f_tags", "value", "a, b"],
      ["f_done", "value", "false"],
      ["f_name", "copy", "f_status"],
    ]);
    const { input, errors } = toPayload(f, ctx);
    expect(errors).toEqual({});
    const { id: _i, table_id: _t, created_at: _c, updated_at: _u, ...want } = a;
    expect(input).toEqual(want);
  });

  it("parses a condition whose value holds colons", () => {
    expect(parseCondition("f_name:eq:10:30")).toMatchObject({ field: "f_name", op: "eq", value: "10:30" });
  });
});

describe("helpers", () => {
  it("offers the operators the filter takes for each type", () => {
    expect(opsFor("checkbox")).toEqual(["eq", "neq", "empty", "not_empty"]);
    expect(opsFor("number")).not.toContain("contains");
    expect(opsFor("multi_select")).toEqual(["eq", "neq", "contains", "empty", "not_empty"]);
    expect(opsFor("text")).toContain("gt");
  });

  it("checks URLs as the server does", () => {
    expect(urlProblem("https://example.com/x")).toBe("");
    expect(urlProblem("")).toMatch(/needs a URL/);
    expect(urlProblem("example.com")).toMatch(/absolute/);
    expect(urlProblem("https://u:p@example.com")).toMatch(/user or password/);
    expect(urlProblem("https://example.com/" + "x".repeat(2000))).toMatch(/at most/);
  });

  it("checks single select values against the choices", () => {
    expect(cellValue(fields[3], "Shut").problem).toMatch(/not one of the choices/);
    expect(cellValue(fields[3], "Open").value).toBe("Open");
  });

  it("turns 422 details into errors by path, and names the paths", () => {
    const errors = errorsOf(
      [
        { field: "actions[0].url", message: "bad url" },
        { field: "actions[0].url", message: "too long" },
        { field: "actions[1].cells.f_status", message: "not a choice" },
      ],
      "the automation is invalid",
    );
    expect(errors["actions[0].url"]).toBe("bad url; too long");
    expect(errors["actions[1].cells.f_status"]).toBe("not a choice");
    expect(errorsOf([], "a table has at most 50 automations")).toEqual({ "": "a table has at most 50 automations" });
    const name = (id: string) => fields.find((f) => f.id === id)?.name ?? id;
    expect(pathLabel("actions[1].cells.f_status", name)).toBe("Action 2, cell “Status”");
    expect(pathLabel("actions[0].url", name)).toBe("Action 1, URL");
    expect(pathLabel("condition[2]", name)).toBe("Condition 3");
    expect(pathLabel("trigger.fields[0]", name)).toBe("Trigger fields");
  });

  it("finds the secrets an answer shows", () => {
    const a = { actions: [{ type: "webhook", url: "u", secret: "whsec_x" }, { type: "webhook", url: "v" }, { type: "update_row", cells: {} }] } as unknown as Automation;
    expect(shownSecrets(a)).toEqual([{ url: "u", secret: "whsec_x" }]);
  });
});
