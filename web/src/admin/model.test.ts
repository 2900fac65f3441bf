import { describe, expect, it } from "vitest";
import type { RealmUsage } from "../api";
import { ago } from "./format";
import { describeAudit, usageSeries } from "./model";

const minute = (at: string, requests: number, refused: Record<string, number> = {}) => ({
  at,
  requests,
  p95_ms: requests ? 4 : null,
  refused,
  seats: requests / 100,
  queue_waits: 0,
  mean_wait_ms: null,
});

describe("usageSeries", () => {
  it("draws requests and one line per refusal reason seen in the hour, with gaps as nulls", () => {
    const u: RealmUsage = {
      id: "r",
      requests_last_hour: 150,
      refused_last_hour: 7,
      minutes: [minute("2026-12-04T10:00:00Z", 0), minute("2026-12-04T10:01:00Z", 150, { rate_limited: 5, concurrency_limited: 2 })],
    };
    const s = usageSeries(u);
    expect(s.x).toEqual([Date.parse("2026-12-04T10:00:00Z") / 1000, Date.parse("2026-12-04T10:01:00Z") / 1000]);
    expect(s.requests.map((r) => r.label)).toEqual(["requests", "concurrency limited", "rate limited"]);
    expect(s.requests[2].values).toEqual([0, 5]);
    expect(s.latency[0].values).toEqual([null, 4]);
    expect(s.seats[0].values).toEqual([0, 1.5]);
  });
});

describe("describeAudit", () => {
  const e = (action: string, detail: Record<string, unknown>) => ({ id: 1, at: "2026-12-04T10:00:00Z", actor: "user:x", action, detail });
  it("says what happened in words", () => {
    expect(describeAudit(e("member_role_changed", { email: "a@b", from: "viewer", to: "editor" }))).toBe("changed a@b from viewer to editor");
    expect(describeAudit(e("token_limit_changed", { name: "sync", requests_per_minute: null }))).toBe("set the ceiling of token sync to none");
    expect(describeAudit(e("rate_limited", { scope: "token", limit: 30, token: "t1" }))).toBe("refusals began: token ceiling of 30/min (token t1)");
  });
  it("shows an action it does not know as its detail", () => {
    expect(describeAudit(e("something_new", { n: 1 }))).toBe('{"n":1}');
  });
});

describe("ago", () => {
  it("is relative within a day", () => {
    const now = Date.parse("2026-12-04T10:00:00Z");
    expect(ago(null)).toBe("never");
    expect(ago("2026-12-04T09:59:30Z", now)).toBe("just now");
    expect(ago("2026-12-04T09:45:00Z", now)).toBe("15 min ago");
    expect(ago("2026-12-04T07:00:00Z", now)).toBe("3 h ago");
  });
});
