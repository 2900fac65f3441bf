import { describe, expect, it, vi } from "vitest";
import { ApiError, type Row, type RowPage } from "./api";
import { RowWindow } from "./rows";

// A keyset server over n rows: the cursor is the last id of the previous page.
function table(n: number) {
  const ids = Array.from({ length: n }, (_, i) => "r" + String(i).padStart(6, "0"));
  const calls: { cursor: string | null; limit: number }[] = [];
  const fetchPage = vi.fn(async (cursor: string | null, limit: number, _signal?: AbortSignal): Promise<RowPage> => {
    calls.push({ cursor, limit });
    const start = cursor === null ? 0 : ids.indexOf(cursor) + 1;
    const rows: Row[] = ids.slice(start, start + limit).map((id) => ({ id, version: 1, cells: { f: id } }));
    const next = start + limit < n ? rows[rows.length - 1].id : null;
    return { rows, next_cursor: next };
  });
  return { fetchPage, calls, ids };
}

const noSleep = vi.fn(async (_ms: number, _signal?: AbortSignal) => {});

describe("RowWindow", () => {
  it("loads the first page without counting, then shows a placeholder page while more exist", async () => {
    const t = table(1000);
    const w = new RowWindow({ fetchPage: t.fetchPage, pageSize: 100, sleep: noSleep });
    expect(w.rowCount).toBeGreaterThan(0);
    await w.setView(0, 20);
    expect(t.calls[0]).toEqual({ cursor: null, limit: 100 });
    expect(w.get(0)?.id).toBe("r000000");
    expect(w.get(99)?.id).toBe("r000099");
    expect(w.get(100)).toBeUndefined();
    expect(w.hasMore).toBe(true);
    expect(w.rowCount).toBe(100 + 100);
  });

  it("follows next_cursor page by page to the end, in order", async () => {
    const t = table(1050);
    const w = new RowWindow({ fetchPage: t.fetchPage, pageSize: 100, maxPages: 20, sleep: noSleep });
    await w.setView(0, 10);
    while (w.hasMore) await w.setView(w.rowCount - 10, w.rowCount - 1);
    expect(w.hasMore).toBe(false);
    expect(w.rowCount).toBe(1050);
    expect(t.calls.map((c) => c.cursor)).toEqual([null, ...Array.from({ length: 10 }, (_, i) => t.ids[i * 100 + 99])]);
    expect(w.get(1049)?.id).toBe("r001049");
  });

  it("holds a bounded number of rows and reloads a dropped page from its own cursor", async () => {
    const t = table(5000);
    const w = new RowWindow({ fetchPage: t.fetchPage, pageSize: 100, maxPages: 4, sleep: noSleep });
    await w.setView(0, 30);
    for (let first = 0; w.hasMore; first += 60) {
      await w.setView(first, first + 30);
      expect(w.heldRows).toBeLessThanOrEqual(4 * 100);
    }
    expect(w.rowCount).toBe(5000);
    expect(w.get(0)).toBeUndefined(); // dropped
    const before = t.calls.length;
    await w.setView(1230, 1260);
    expect(t.calls.slice(before)[0]).toEqual({ cursor: t.ids[1199], limit: 100 });
    expect(w.get(1250)?.id).toBe("r001250");
    expect(w.heldRows).toBeLessThanOrEqual(400);
  });

  it("backs off by Retry-After on 429 and then loads", async () => {
    const t = table(300);
    let refusals = 2;
    const sleep = vi.fn(async (_ms: number, _signal?: AbortSignal) => {});
    const statuses: string[] = [];
    const w = new RowWindow({
      pageSize: 100,
      sleep,
      onStatus: (s) => statuses.push(s.kind),
      fetchPage: async (c, l, s) => {
        if (refusals-- > 0) throw new ApiError(429, "rate_limited", "slow down", [], 1500);
        return t.fetchPage(c, l, s);
      },
    });
    await w.setView(0, 10);
    expect(sleep.mock.calls.map((c) => c[0])).toEqual([1500, 1500]);
    expect(statuses).toContain("waiting");
    expect(w.get(5)?.id).toBe("r000005");
    expect(w.status.kind).toBe("idle");
  });

  it("doubles its own back-off when a refusal gives no Retry-After", async () => {
    const t = table(50);
    let refusals = 3;
    const sleep = vi.fn(async (_ms: number, _signal?: AbortSignal) => {});
    const w = new RowWindow({
      pageSize: 100,
      sleep,
      backoffMs: 200,
      fetchPage: async (c, l, s) => {
        if (refusals-- > 0) throw new ApiError(503, "unavailable", "busy");
        return t.fetchPage(c, l, s);
      },
    });
    await w.setView(0, 10);
    expect(sleep.mock.calls.map((c) => c[0])).toEqual([200, 400, 800]);
    expect(w.rowCount).toBe(50);
  });

  it("does not retry a real error, and retry() loads again", async () => {
    const t = table(50);
    let fail = true;
    const w = new RowWindow({
      pageSize: 100,
      sleep: noSleep,
      fetchPage: async (c, l, s) => {
        if (fail) throw new ApiError(404, "not_found", "table not found");
        return t.fetchPage(c, l, s);
      },
    });
    await w.setView(0, 10);
    expect(w.status).toEqual({ kind: "error", message: "table not found", status: 404 });
    expect(w.get(0)).toBeUndefined();
    fail = false;
    await w.retry();
    expect(w.get(0)?.id).toBe("r000000");
  });

  it("removes deleted rows and appends new ones at a known end", async () => {
    const t = table(150);
    const w = new RowWindow({ fetchPage: t.fetchPage, pageSize: 100, sleep: noSleep });
    await w.setView(0, 149);
    await w.setView(100, 149);
    expect(w.rowCount).toBe(150);
    w.remove(["r000001", "r000120"]);
    expect(w.rowCount).toBe(148);
    expect(w.get(1)?.id).toBe("r000002");
    expect(w.get(118)?.id).toBe("r000119");
    expect(w.get(119)?.id).toBe("r000121");
    expect(w.append([{ id: "new", version: 1, cells: {} }])).toBe(true);
    expect(w.get(148)?.id).toBe("new");
  });

  it("stops loading when closed", async () => {
    const t = table(500);
    const w = new RowWindow({ fetchPage: t.fetchPage, pageSize: 100, sleep: noSleep });
    w.close();
    await w.setView(0, 10);
    expect(t.calls.length).toBe(0);
  });
});
