// Saver sends cell edits to the server at once, with each row's version, and
// makes sure nothing typed is silently lost:
//
//   - edits to a row made while its save is in flight wait and go next, with
//     the version that save returned (one PATCH in flight per row);
//   - 409: someone else changed the row; the row's current value is fetched
//     and handed to onConflict together with what was typed;
//   - 422: the cells named in the details are marked invalid, keeping the
//     typed value on show with the message; the row's other cells are sent;
//   - 429/503: wait Retry-After (else back off), keep accepting edits, retry;
//   - network failure: back off and retry.
//
// While anything is pending, hasUnsaved is true (the page warns on unload).

import { ApiError, type Row } from "./api";
import { defaultSleep, type Sleep } from "./rows";

export type CellState =
  | { kind: "pending"; value: unknown }
  | { kind: "invalid"; value: unknown; message: string }
  | { kind: "conflict"; value: unknown; theirs: unknown };

export type SaverStatus =
  | { kind: "idle" }
  | { kind: "saving"; rows: number }
  | { kind: "waiting"; retryInMs: number; reason: string }
  | { kind: "error"; message: string };

export interface Conflict {
  rowId: string;
  mine: Record<string, unknown>;
  theirs: Row | null;
}

export interface SaverOptions {
  patch: (rows: Row[]) => Promise<Row[]>;
  getRow: (id: string) => Promise<Row>;
  onSaved?: (row: Row) => void;
  onConflict?: (c: Conflict) => void;
  /** A cell the server refused (422), with what was typed and why. */
  onInvalid?: (rowId: string, fieldId: string, value: unknown, message: string) => void;
  onChange?: () => void;
  onStatus?: (s: SaverStatus) => void;
  sleep?: Sleep;
  backoffMs?: number;
  maxBackoffMs?: number;
  /** Rows per PATCH. */
  batch?: number;
}

interface Pending {
  version: number;
  cells: Record<string, unknown>;
}

export class Saver {
  private pending = new Map<string, Pending>();
  private inflight = new Map<string, Pending>();
  private marks = new Map<string, Map<string, CellState>>();
  private scheduled = false;
  private waitingUntil = 0;
  private backoff: number;
  private abort = new AbortController();
  private idleWaiters: (() => void)[] = [];
  status: SaverStatus = { kind: "idle" };
  private o: SaverOptions & { sleep: Sleep; backoffMs: number; maxBackoffMs: number; batch: number };

  constructor(o: SaverOptions) {
    this.o = { sleep: defaultSleep, backoffMs: 500, maxBackoffMs: 30_000, batch: 100, ...o };
    this.backoff = this.o.backoffMs;
  }

  /** Record an edit and send it as soon as the row is free. */
  edit(rowId: string, version: number, fieldId: string, value: unknown) {
    const p = this.pending.get(rowId) ?? { version, cells: {} };
    // A queued edit keeps the newest version this client knows for the row.
    p.version = Math.max(p.version, version);
    p.cells[fieldId] = value;
    this.pending.set(rowId, p);
    this.mark(rowId, fieldId, { kind: "pending", value });
    this.schedule();
  }

  /** What the grid should show for a cell instead of the row's value, if anything. */
  cell(rowId: string, fieldId: string): CellState | undefined {
    return this.marks.get(rowId)?.get(fieldId);
  }

  /** Forget a mark (the person dismissed a conflict or an error). */
  dismiss(rowId: string, fieldId: string) {
    const m = this.marks.get(rowId);
    if (m?.get(fieldId)?.kind === "pending") return;
    m?.delete(fieldId);
    if (m && m.size === 0) this.marks.delete(rowId);
    this.o.onChange?.();
  }

  get hasUnsaved(): boolean {
    if (this.pending.size > 0 || this.inflight.size > 0) return true;
    for (const m of this.marks.values()) for (const s of m.values()) if (s.kind !== "pending") return true;
    return false;
  }

  /** Resolves when nothing is queued or in flight. */
  idle(): Promise<void> {
    if (this.pending.size === 0 && this.inflight.size === 0) return Promise.resolve();
    return new Promise((r) => this.idleWaiters.push(r));
  }

  close() {
    this.abort.abort(new DOMException("closed", "AbortError"));
  }

  private mark(rowId: string, fieldId: string, s: CellState | null) {
    let m = this.marks.get(rowId);
    if (!s) {
      m?.delete(fieldId);
      if (m && m.size === 0) this.marks.delete(rowId);
    } else {
      if (!m) this.marks.set(rowId, (m = new Map()));
      m.set(fieldId, s);
    }
    this.o.onChange?.();
  }

  private schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    queueMicrotask(() => {
      this.scheduled = false;
      void this.flush();
    });
  }

  private setStatus(s: SaverStatus) {
    this.status = s;
    this.o.onStatus?.(s);
  }

  private async flush(): Promise<void> {
    if (this.abort.signal.aborted || Date.now() < this.waitingUntil) return;
    const batch: Row[] = [];
    const sent = new Map<string, Pending>();
    for (const [id, p] of this.pending) {
      if (this.inflight.has(id)) continue;
      batch.push({ id, version: p.version, cells: { ...p.cells } });
      sent.set(id, p);
      if (batch.length >= this.o.batch) break;
    }
    if (batch.length === 0) {
      this.settle();
      return;
    }
    for (const [id, p] of sent) {
      this.pending.delete(id);
      this.inflight.set(id, p);
    }
    this.setStatus({ kind: "saving", rows: this.inflight.size });
    try {
      const saved = await this.o.patch(batch);
      this.backoff = this.o.backoffMs;
      for (const row of saved) this.saved(row, sent.get(row.id));
      this.done(sent);
    } catch (e) {
      this.done(sent);
      await this.failed(e, batch, sent);
    }
    this.schedule();
  }

  private done(sent: Map<string, Pending>) {
    for (const id of sent.keys()) this.inflight.delete(id);
  }

  private saved(row: Row, sent: Pending | undefined) {
    const queued = this.pending.get(row.id);
    if (queued) queued.version = Math.max(queued.version, row.version);
    for (const f of Object.keys(sent?.cells ?? {})) {
      // A later edit to the same cell keeps its pending mark.
      if (!queued || !(f in queued.cells)) this.mark(row.id, f, null);
    }
    this.o.onSaved?.(row);
  }

  /** Put a failed batch back in front of anything typed since, keeping the newer values. */
  private requeue(rows: Row[]) {
    for (const r of rows) {
      const later = this.pending.get(r.id);
      this.pending.set(r.id, { version: Math.max(r.version, later?.version ?? 0), cells: { ...r.cells, ...later?.cells } });
    }
  }

  private async failed(e: unknown, batch: Row[], sent: Map<string, Pending>) {
    if (e instanceof ApiError && e.retryable) {
      const wait = e.retryAfterMs > 0 ? e.retryAfterMs : this.backoff;
      this.backoff = Math.min(this.backoff * 2, this.o.maxBackoffMs);
      this.requeue(batch);
      return this.wait(wait, e.code);
    }
    if (!(e instanceof ApiError)) {
      const wait = this.backoff;
      this.backoff = Math.min(this.backoff * 2, this.o.maxBackoffMs);
      this.requeue(batch);
      return this.wait(wait, "network");
    }
    if (e.status === 409) {
      if (batch.length > 1) {
        // Which row is stale is not said for a batch: send each alone.
        this.requeue(batch);
        const saved = this.o.batch;
        this.o.batch = 1;
        await this.drainSingly(batch.map((r) => r.id));
        this.o.batch = saved;
        return;
      }
      return this.conflict(batch[0]);
    }
    if (e.status === 422) {
      const bad = new Set<string>();
      for (const d of e.details) {
        const row = d.row !== undefined ? batch[d.row] : batch.length === 1 ? batch[0] : undefined;
        if (!row) continue;
        const fields = d.field ? [d.field] : Object.keys(row.cells);
        for (const f of fields) {
          if (!(f in row.cells)) continue;
          bad.add(row.id + "\u0000" + f);
          this.mark(row.id, f, { kind: "invalid", value: row.cells[f], message: d.message });
          this.o.onInvalid?.(row.id, f, row.cells[f], d.message);
        }
      }
      if (bad.size === 0) {
        // No details to go by: mark every cell of the batch with the message.
        for (const r of batch) for (const f of Object.keys(r.cells)) this.mark(r.id, f, { kind: "invalid", value: r.cells[f], message: e.message });
        return;
      }
      // Send the rest again; the invalid cells stay marked with what was typed.
      const rest: Row[] = [];
      for (const r of batch) {
        const cells: Record<string, unknown> = {};
        for (const [f, v] of Object.entries(r.cells)) if (!bad.has(r.id + "\u0000" + f)) cells[f] = v;
        if (Object.keys(cells).length > 0) rest.push({ ...r, cells });
      }
      this.requeue(rest);
      return;
    }
    // Anything else (403, 404, 500): the values stay on show, marked, never dropped.
    for (const r of batch) for (const f of Object.keys(r.cells)) this.mark(r.id, f, { kind: "invalid", value: r.cells[f], message: e.message });
    void sent;
    this.setStatus({ kind: "error", message: e.message });
  }

  private async drainSingly(ids: string[]) {
    for (const id of ids) {
      const p = this.pending.get(id);
      if (!p) continue;
      this.pending.delete(id);
      const one = new Map([[id, p]]);
      this.inflight.set(id, p);
      const row = { id, version: p.version, cells: { ...p.cells } };
      try {
        const saved = await this.o.patch([row]);
        this.done(one);
        for (const r of saved) this.saved(r, p);
      } catch (e) {
        this.done(one);
        await this.failed(e, [row], one);
      }
    }
  }

  private async conflict(row: Row) {
    let theirs: Row | null = null;
    try {
      theirs = await this.o.getRow(row.id);
    } catch {
      // deleted, or unreachable: report the conflict without their value
    }
    const later = this.pending.get(row.id);
    for (const [f, v] of Object.entries(row.cells)) {
      if (later && f in later.cells) continue;
      this.mark(row.id, f, { kind: "conflict", value: v, theirs: theirs?.cells[f] });
    }
    if (later && theirs) later.version = theirs.version;
    if (theirs) this.o.onSaved?.(theirs);
    this.o.onConflict?.({ rowId: row.id, mine: row.cells, theirs });
  }

  private async wait(ms: number, reason: string) {
    this.waitingUntil = Date.now() + ms;
    this.setStatus({ kind: "waiting", retryInMs: ms, reason });
    try {
      await this.o.sleep(ms, this.abort.signal);
    } catch {
      return;
    }
    this.waitingUntil = 0;
  }

  private settle() {
    if (this.inflight.size > 0 || this.pending.size > 0) return;
    if (this.status.kind !== "error") this.setStatus({ kind: "idle" });
    const w = this.idleWaiters;
    this.idleWaiters = [];
    for (const r of w) r();
  }
}
