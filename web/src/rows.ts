// RowWindow holds the rows around what the grid shows, loaded lazily through
// the API's keyset pages, and never more than maxPages pages of them whatever
// the table's size.
//
// Keyset pages have no random access: page k starts at the cursor page k-1
// ended with. So the window keeps a chain of page descriptors — start cursor,
// length, next cursor — which is tiny (one cursor per page), and holds rows
// only for the pages nearest the visible region; a page it dropped is fetched
// again from its start cursor when scrolled back to. Nothing ever counts the
// table: the grid's row count is the rows known so far plus one placeholder
// page while more exist, and reaching the placeholders loads the next page.
//
// Positions are kept stable: a page fetched again fills its old slot even if
// rows were added or removed elsewhere meanwhile. That can show a row twice
// or skip one after concurrent changes until the view is reset (sort, filter,
// search or reload), which is the price of never counting.

import { ApiError, type Row, type RowPage } from "./api";

export type FetchPage = (cursor: string | null, limit: number, signal: AbortSignal) => Promise<RowPage>;
export type Sleep = (ms: number, signal: AbortSignal) => Promise<void>;

export type WindowStatus =
  | { kind: "idle" }
  | { kind: "loading" }
  | { kind: "waiting"; retryInMs: number; reason: string }
  | { kind: "error"; message: string; status?: number }; // status: the API's, when it answered

interface Page {
  cursor: string | null; // where the page starts
  length: number; // rows it had when last loaded (or pageSize before)
  next: string | null; // where the following page starts; null at the end
  rows: Row[] | null; // null when not held
  loading: Promise<void> | null;
  lastUsed: number;
  failed: boolean;
}

export interface RowWindowOptions {
  fetchPage: FetchPage;
  pageSize?: number;
  maxPages?: number;
  sleep?: Sleep;
  onChange?: () => void;
  onStatus?: (s: WindowStatus) => void;
  /** Back-off when a refusal carries no Retry-After, doubled up to maxBackoffMs. */
  backoffMs?: number;
  maxBackoffMs?: number;
}

export const defaultSleep: Sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      reject(signal.reason);
    });
  });

export class RowWindow {
  readonly pageSize: number;
  readonly maxPages: number;
  private pages: Page[] = [];
  private starts: number[] = []; // starts[i] = index of page i's first row
  private known = 0; // rows in known pages
  private byId = new Map<string, Row>();
  private started = false;
  private clock = 0;
  private abort = new AbortController();
  private view: [number, number] = [0, 0];
  private o: Required<Omit<RowWindowOptions, "onChange" | "onStatus">> & Pick<RowWindowOptions, "onChange" | "onStatus">;
  status: WindowStatus = { kind: "idle" };

  constructor(o: RowWindowOptions) {
    this.o = { pageSize: 500, maxPages: 8, sleep: defaultSleep, backoffMs: 500, maxBackoffMs: 30_000, ...o };
    this.pageSize = this.o.pageSize;
    this.maxPages = Math.max(3, this.o.maxPages);
  }

  /** Rows the grid should show: known rows, plus a placeholder page while more exist. */
  get rowCount(): number {
    return this.known + (this.hasMore ? Math.min(this.pageSize, 100) : 0);
  }

  /** Whether rows exist past the known ones (or the first page is not in yet). */
  get hasMore(): boolean {
    if (!this.started) return true;
    const last = this.pages[this.pages.length - 1];
    return last !== undefined && (last.rows === null && last.loading !== null ? true : last.next !== null);
  }

  /** Rows whose existence is known so far. */
  get knownRows(): number {
    return this.known;
  }

  /** Rows held in memory now; bounded by maxPages × pageSize. */
  get heldRows(): number {
    let n = 0;
    for (const p of this.pages) if (p.rows) n += p.rows.length;
    return n;
  }

  /** Start cursors of the known pages, for tests and diagnostics. */
  get cursors(): (string | null)[] {
    return this.pages.map((p) => p.cursor);
  }

  /** The row at a position, or undefined while it is not loaded. */
  get(index: number): Row | undefined {
    const i = this.pageOf(index);
    if (i < 0) return undefined;
    const p = this.pages[i];
    if (!p.rows) return undefined;
    p.lastUsed = ++this.clock;
    return p.rows[index - this.starts[i]];
  }

  /** A held row by id. */
  byID(id: string): Row | undefined {
    return this.byId.get(id);
  }

  /** Tell the window what the grid shows; it loads what is missing and drops what is far. */
  setView(first: number, last: number): Promise<void> {
    this.view = [Math.max(0, first), Math.max(first, last)];
    return this.fill();
  }

  /** Stop all loading; the window is dead after this. */
  close() {
    this.abort.abort(new DOMException("closed", "AbortError"));
  }

  /** Replace a held row's cells and version (after a save or a conflict). */
  update(row: Row) {
    const held = this.byId.get(row.id);
    if (!held) return;
    held.version = row.version;
    held.cells = row.cells;
    this.o.onChange?.();
  }

  /** Remove rows from the held pages (after a delete). */
  remove(ids: Iterable<string>) {
    const gone = new Set(ids);
    let changed = false;
    for (const p of this.pages) {
      if (!p.rows) continue;
      const keep = p.rows.filter((r) => !gone.has(r.id));
      if (keep.length !== p.rows.length) {
        p.rows = keep;
        p.length = keep.length;
        changed = true;
      }
    }
    for (const id of gone) this.byId.delete(id);
    if (changed) {
      this.reindex();
      this.o.onChange?.();
    }
  }

  /** Add new rows at the end when the end is known; otherwise they arrive when scrolled to. */
  append(rows: Row[]): boolean {
    const last = this.pages[this.pages.length - 1];
    if (!this.started || !last || last.next !== null || !last.rows) return false;
    last.rows.push(...rows);
    last.length = last.rows.length;
    for (const r of rows) this.byId.set(r.id, r);
    this.reindex();
    this.o.onChange?.();
    return true;
  }

  private pageOf(index: number): number {
    let lo = 0;
    let hi = this.pages.length - 1;
    if (hi < 0 || index < 0 || index >= this.known) return -1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.starts[mid] <= index) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  private reindex() {
    let n = 0;
    this.starts = this.pages.map((p) => {
      const s = n;
      n += p.length;
      return s;
    });
    this.known = n;
  }

  private async fill(): Promise<void> {
    if (this.abort.signal.aborted) return;
    if (!this.started) {
      this.started = true;
      this.pages.push({ cursor: null, length: 0, next: null, rows: null, loading: null, lastUsed: 0, failed: false });
      await this.load(0);
      return this.fill();
    }
    const [first, last] = this.view;
    const pad = Math.ceil(this.pageSize / 4);
    const lo = this.pageOf(Math.max(0, first - pad));
    const wantEnd = last + pad;
    const work: Promise<void>[] = [];
    const head = this.pages[0];
    if (this.known === 0 && !head.rows && !head.failed) work.push(this.load(0).then(() => this.fill()));
    if (lo >= 0) {
      for (let i = lo; i < this.pages.length && this.starts[i] <= wantEnd; i++) {
        const p = this.pages[i];
        p.lastUsed = ++this.clock;
        if (!p.rows && !p.failed) work.push(this.load(i));
      }
    }
    // Past the known rows: follow the chain one page at a time.
    const tail = this.pages[this.pages.length - 1];
    if (wantEnd >= this.known && tail.next !== null) {
      this.pages.push({ cursor: tail.next, length: 0, next: null, rows: null, loading: null, lastUsed: ++this.clock, failed: false });
      work.push(this.load(this.pages.length - 1).then(() => this.fill()));
    }
    await Promise.all(work);
  }

  private load(i: number): Promise<void> {
    const p = this.pages[i];
    if (p.loading) return p.loading;
    const limit = p.rows === null && p.length > 0 ? p.length : this.pageSize;
    p.loading = this.fetchWithBackoff(p.cursor, limit)
      .then((page) => {
        if (!page) return;
        p.rows = page.rows;
        p.next = page.next_cursor ?? null;
        p.length = page.rows.length;
        p.failed = false;
        for (const r of page.rows) this.byId.set(r.id, r);
        this.reindex();
        this.evict();
        this.setStatus({ kind: "idle" });
        this.o.onChange?.();
      })
      .catch((e: unknown) => {
        if (this.abort.signal.aborted) return;
        p.failed = true;
        this.setStatus({ kind: "error", message: e instanceof Error ? e.message : String(e), status: e instanceof ApiError ? e.status : undefined });
        this.o.onChange?.();
      })
      .finally(() => {
        p.loading = null;
      });
    return p.loading;
  }

  /** Retry after a failed page: clears the failure marks and fills again. */
  retry(): Promise<void> {
    for (const p of this.pages) p.failed = false;
    return this.fill();
  }

  private async fetchWithBackoff(cursor: string | null, limit: number): Promise<RowPage | null> {
    let backoff = this.o.backoffMs;
    for (;;) {
      if (this.abort.signal.aborted) return null;
      this.setStatus({ kind: "loading" });
      try {
        return await this.o.fetchPage(cursor, limit, this.abort.signal);
      } catch (e) {
        if (this.abort.signal.aborted) return null;
        let wait: number;
        let reason: string;
        if (e instanceof ApiError && e.retryable) {
          wait = e.retryAfterMs > 0 ? e.retryAfterMs : backoff;
          reason = e.code;
        } else if (e instanceof TypeError) {
          wait = backoff; // the network: the server may be restarting
          reason = "network";
        } else {
          throw e;
        }
        backoff = Math.min(backoff * 2, this.o.maxBackoffMs);
        this.setStatus({ kind: "waiting", retryInMs: wait, reason });
        try {
          await this.o.sleep(wait, this.abort.signal);
        } catch {
          return null;
        }
      }
    }
  }

  /** Drop the least recently used pages outside the view while too many are held. */
  private evict() {
    const [first, last] = this.view;
    const held = this.pages.map((p, i) => ({ p, i })).filter(({ p }) => p.rows !== null);
    if (held.length <= this.maxPages) return;
    const visible = (i: number) => this.starts[i] <= last && this.starts[i] + this.pages[i].length > first;
    const drop = held
      .filter(({ i }) => !visible(i))
      .sort((a, b) => a.p.lastUsed - b.p.lastUsed)
      .slice(0, held.length - this.maxPages);
    for (const { p } of drop) {
      for (const r of p.rows!) this.byId.delete(r.id);
      p.rows = null;
    }
  }

  private setStatus(s: WindowStatus) {
    if (s.kind === this.status.kind && s.kind !== "waiting") return;
    this.status = s;
    this.o.onStatus?.(s);
  }
}
