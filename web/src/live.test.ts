import { describe, expect, it } from "vitest";
import { LiveFeed, backoffMs, toFetch, type LiveState } from "./live";

class FakeSource {
  readyState = 0;
  onerror: ((e: Event) => void) | null = null;
  closed = false;
  private listeners = new Map<string, ((e: Event) => void)[]>();
  addEventListener(type: string, fn: (e: Event) => void) {
    this.listeners.set(type, [...(this.listeners.get(type) ?? []), fn]);
  }
  emit(type: string, data = "{}") {
    for (const fn of this.listeners.get(type) ?? []) fn(new MessageEvent(type, { data }));
  }
  close() {
    this.closed = true;
    this.readyState = 2;
  }
}

describe("live", () => {
  it("backs off 1 s, 2 s, 4 s … up to 30 s", () => {
    expect([0, 1, 2, 3, 4, 5, 6, 40].map(backoffMs)).toEqual([1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]);
  });

  it("fetches the held updated rows and every created one, 100 a request", () => {
    const held = new Set(["u1"]);
    expect(toFetch({ created: ["c1"], updated: ["u1", "u2"], deleted: ["d1"] }, (id) => held.has(id))).toEqual([["c1", "u1"]]);
    const many = Array.from({ length: 250 }, (_, i) => "c" + i);
    expect(toFetch({ created: many }, () => false).map((b) => b.length)).toEqual([100, 100, 50]);
    expect(toFetch({ deleted: ["d"] }, () => true)).toEqual([]);
  });

  it("reports its state, hands on rows and resyncs, and reconnects after the source closes", async () => {
    const made: FakeSource[] = [];
    const states: LiveState[] = [];
    const rows: unknown[] = [];
    const resyncs: string[] = [];
    const feed = new LiveFeed(
      "/events",
      { onState: (s) => states.push(s), onRows: (e) => rows.push(e), onResync: (r) => resyncs.push(r) },
      () => {
        const s = new FakeSource();
        made.push(s);
        // The fake has what LiveFeed uses of an EventSource, with looser
        // listener types than the DOM's overloads.
        return s as unknown as EventSource & { onerror: ((e: Event) => void) | null };
      },
    );
    expect(states).toEqual(["connecting"]);
    made[0].emit("hello");
    made[0].emit("rows", '{"updated":["a"]}');
    made[0].emit("resync", '{"reason":"fields"}');
    expect(states).toEqual(["connecting", "live"]);
    expect(rows).toEqual([{ updated: ["a"] }]);
    expect(resyncs).toEqual(["fields"]);

    // A dropped connection the browser retries itself: reconnecting, no new
    // source, and a resync once it is back (events may have passed).
    made[0].onerror?.(new Event("error"));
    expect(states.at(-1)).toBe("reconnecting");
    expect(made).toHaveLength(1);
    made[0].emit("hello");
    expect(states.at(-1)).toBe("live");
    expect(resyncs).toEqual(["fields", "reconnect"]);

    // An HTTP error closes the source: a new one after the back-off, then a resync.
    made[0].readyState = 2;
    made[0].onerror?.(new Event("error"));
    await new Promise((r) => setTimeout(r, 1100));
    expect(made).toHaveLength(2);
    made[1].emit("hello");
    expect(states.at(-1)).toBe("live");
    expect(resyncs).toEqual(["fields", "reconnect", "reconnect"]);
    feed.close();
    expect(made[1].closed).toBe(true);
  });
});
