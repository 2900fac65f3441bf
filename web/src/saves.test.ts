import { describe, expect, it, vi } from "vitest";
import { ApiError, type Row } from "./api";
import { Saver, type Conflict } from "./saves";

function server() {
  const rows = new Map<string, Row>([
    ["a", { id: "a", version: 1, cells: { name: "old" } }],
    ["b", { id: "b", version: 4, cells: { name: "bee" } }],
  ]);
  const patches: Row[][] = [];
  const patch = vi.fn(async (batch: Row[]) => {
    patches.push(structuredClone(batch));
    return batch.map((r) => {
      const cur = rows.get(r.id)!;
      if (cur.version !== r.version) throw new ApiError(409, "conflict", "stale version");
      const next = { id: r.id, version: cur.version + 1, cells: { ...cur.cells, ...r.cells } };
      rows.set(r.id, next);
      return next;
    });
  });
  return { rows, patches, patch, getRow: async (id: string) => structuredClone(rows.get(id)!) };
}

describe("Saver", () => {
  it("saves an edit at once with the row's version", async () => {
    const s = server();
    const saved: Row[] = [];
    const sv = new Saver({ patch: s.patch, getRow: s.getRow, onSaved: (r) => saved.push(r) });
    sv.edit("a", 1, "name", "new");
    expect(sv.cell("a", "name")).toEqual({ kind: "pending", value: "new" });
    await sv.idle();
    expect(s.patches).toEqual([[{ id: "a", version: 1, cells: { name: "new" } }]]);
    expect(saved[0]).toMatchObject({ id: "a", version: 2 });
    expect(sv.cell("a", "name")).toBeUndefined();
    expect(sv.hasUnsaved).toBe(false);
  });

  it("sends edits typed during a save next, with the version that save returned", async () => {
    const s = server();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const patch = vi.fn(async (b: Row[]) => {
      if (patch.mock.calls.length === 1) await gate;
      return s.patch(b);
    });
    const sv = new Saver({ patch, getRow: s.getRow });
    sv.edit("a", 1, "name", "one");
    await Promise.resolve();
    sv.edit("a", 1, "name", "two");
    sv.edit("a", 1, "other", "x");
    release();
    await sv.idle();
    expect(s.patches).toEqual([
      [{ id: "a", version: 1, cells: { name: "one" } }],
      [{ id: "a", version: 2, cells: { name: "two", other: "x" } }],
    ]);
    expect(s.rows.get("a")).toMatchObject({ version: 3, cells: { name: "two", other: "x" } });
  });

  it("on 409 fetches the current row and reports both values", async () => {
    const s = server();
    s.rows.set("a", { id: "a", version: 7, cells: { name: "theirs" } });
    const conflicts: Conflict[] = [];
    const saved: Row[] = [];
    const sv = new Saver({ patch: s.patch, getRow: s.getRow, onConflict: (c) => conflicts.push(c), onSaved: (r) => saved.push(r) });
    sv.edit("a", 1, "name", "mine");
    await sv.idle();
    await vi.waitFor(() => expect(conflicts).toHaveLength(1));
    expect(conflicts[0]).toMatchObject({ rowId: "a", mine: { name: "mine" }, theirs: { version: 7, cells: { name: "theirs" } } });
    expect(sv.cell("a", "name")).toEqual({ kind: "conflict", value: "mine", theirs: "theirs" });
    expect(saved.at(-1)).toMatchObject({ version: 7 });
    expect(sv.hasUnsaved).toBe(true); // what was typed is still there to keep or drop
  });

  it("on 422 marks the invalid cell with the message and saves the rest", async () => {
    const s = server();
    const patch = vi.fn(async (b: Row[]) => {
      if ("n" in b[0].cells) throw new ApiError(422, "validation_failed", "invalid", [{ row: 0, field: "n", message: "not a number" }]);
      return s.patch(b);
    });
    const sv = new Saver({ patch, getRow: s.getRow });
    sv.edit("a", 1, "n", "abc");
    sv.edit("a", 1, "name", "fine");
    await vi.waitFor(() => expect(s.patches).toHaveLength(1));
    await sv.idle();
    expect(sv.cell("a", "n")).toEqual({ kind: "invalid", value: "abc", message: "not a number" });
    expect(s.patches[0]).toEqual([{ id: "a", version: 1, cells: { name: "fine" } }]);
  });

  it("on 429 waits Retry-After without dropping edits made meanwhile", async () => {
    const s = server();
    let refuse = true;
    const statuses: string[] = [];
    let wake!: () => void;
    const sleep = vi.fn((_ms: number) => new Promise<void>((r) => (wake = r)));
    const patch = vi.fn(async (b: Row[]) => {
      if (refuse) {
        refuse = false;
        throw new ApiError(429, "rate_limited", "slow down", [], 2000);
      }
      return s.patch(b);
    });
    const sv = new Saver({ patch, getRow: s.getRow, sleep, onStatus: (x) => statuses.push(x.kind) });
    sv.edit("a", 1, "name", "first");
    await vi.waitFor(() => expect(sleep).toHaveBeenCalledWith(2000, expect.anything()));
    expect(statuses).toContain("waiting");
    sv.edit("b", 4, "name", "typed while waiting");
    sv.edit("a", 1, "name", "second");
    expect(patch).toHaveBeenCalledTimes(1); // nothing is sent during the wait
    wake();
    await vi.waitFor(() => expect(s.rows.get("b")?.cells.name).toBe("typed while waiting"));
    await sv.idle();
    expect(s.rows.get("a")?.cells.name).toBe("second");
    expect(sv.hasUnsaved).toBe(false);
  });

  it("retries after a network failure", async () => {
    const s = server();
    let down = 2;
    const sleep = vi.fn(async (_ms: number, _signal?: AbortSignal) => {});
    const patch = vi.fn(async (b: Row[]) => {
      if (down-- > 0) throw new TypeError("Failed to fetch");
      return s.patch(b);
    });
    const sv = new Saver({ patch, getRow: s.getRow, sleep, backoffMs: 100 });
    sv.edit("a", 1, "name", "kept");
    await vi.waitFor(() => expect(s.rows.get("a")?.cells.name).toBe("kept"));
    expect(sleep.mock.calls.map((c) => c[0])).toEqual([100, 200]);
  });
});
