import { describe, expect, it } from "vitest";
import type { AutomationRun } from "../api";
import { appended, canReplay, latencyText, refreshed, withRun } from "./runs";

const run = (id: string, patch: Partial<AutomationRun> = {}): AutomationRun => ({
  id,
  automation_id: "a",
  event: "row.updated",
  row_ids: ["r"],
  hop: 0,
  status: "succeeded",
  attempts: 1,
  queued_at: "",
  started_at: "",
  finished_at: null,
  latency_ms: 5,
  last_error: null,
  deliveries: [],
  ...patch,
});
const ids = (l: { runs: AutomationRun[] }) => l.runs.map((r) => r.id);

describe("run list", () => {
  it("takes the first page as it is", () => {
    expect(refreshed(null, { runs: [run("03"), run("02")], next_cursor: "02" })).toEqual({ runs: [run("03"), run("02")], cursor: "02" });
  });

  it("puts fresh runs on top of the older pages it reaches, with newer copies winning", () => {
    const loaded = appended({ runs: [run("05"), run("04")], cursor: "04" }, { runs: [run("03"), run("02")], next_cursor: "02" });
    expect(ids(loaded)).toEqual(["05", "04", "03", "02"]);
    const fresh = { runs: [run("06"), run("05", { status: "dead" })], next_cursor: "05" };
    const l = refreshed(loaded, fresh);
    expect(ids(l)).toEqual(["06", "05", "04", "03", "02"]);
    expect(l.runs[1].status).toBe("dead");
    expect(l.cursor).toBe("02");
  });

  it("drops older pages when the fresh page does not reach them, rather than leave a gap", () => {
    const loaded = { runs: [run("05"), run("04")], cursor: "04" };
    const l = refreshed(loaded, { runs: [run("09"), run("08")], next_cursor: "08" });
    expect(ids(l)).toEqual(["09", "08"]);
    expect(l.cursor).toBe("08");
  });

  it("a short fresh page is the whole log", () => {
    const l = refreshed({ runs: [run("05"), run("04")], cursor: "04" }, { runs: [run("06"), run("05")], next_cursor: null });
    expect(l).toEqual({ runs: [run("06"), run("05")], cursor: null });
  });

  it("appends without repeats and replaces a replayed run", () => {
    const l = appended({ runs: [run("05"), run("04")], cursor: "04" }, { runs: [run("04"), run("03")], next_cursor: null });
    expect(ids(l)).toEqual(["05", "04", "03"]);
    expect(withRun(l, run("04", { status: "pending" })).runs[1].status).toBe("pending");
  });

  it("offers a replay only for a run with a failed or dead delivery", () => {
    const d = (state: "pending" | "delivered" | "failed" | "dead") => ({
      id: "msg",
      url: "u",
      state,
      attempts: 8,
      last_status: 500,
      last_error: null,
      next_attempt_at: null,
      delivered_at: null,
    });
    expect(canReplay(run("1", { status: "dead", deliveries: [d("delivered"), d("dead")] }))).toBe(true);
    expect(canReplay(run("1", { status: "failed", deliveries: [] }))).toBe(false);
    expect(canReplay(run("1", { deliveries: [d("delivered")] }))).toBe(false);
  });

  it("writes latencies for people", () => {
    expect(latencyText(null)).toBe("—");
    expect(latencyText(850)).toBe("850 ms");
    expect(latencyText(1250)).toBe("1.3 s");
    expect(latencyText(120_000)).toBe("2 min");
  });
});
