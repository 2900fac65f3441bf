// Live updates of one table: a server-sent event stream that reconnects
// with back-off, and the pure rules of applying what it says.

export type LiveState = "connecting" | "live" | "reconnecting";

export interface RowsEvent {
  created?: string[];
  updated?: string[];
  deleted?: string[];
}

export interface LiveHandlers {
  onState: (s: LiveState) => void;
  onRows: (e: RowsEvent) => void;
  /** Reload the table: its fields changed, too much changed, or events may be missed. */
  onResync: (reason: string) => void;
}

/** The wait before reconnect attempt n (0-based): 1 s, 2 s, 4 s … at most 30 s. */
export function backoffMs(attempt: number): number {
  return Math.min(30_000, 1000 * 2 ** Math.min(attempt, 15));
}

type Source = Pick<EventSource, "addEventListener" | "close" | "readyState"> & { onerror: ((e: Event) => void) | null };

/**
 * LiveFeed keeps one EventSource open on url. The browser reconnects by
 * itself after a dropped connection (sending Last-Event-ID); after an HTTP
 * error (the server restarting, a 429) the source closes, and the feed opens
 * a new one after backoffMs, resetting the back-off once `hello` arrives.
 * A reconnect with a fresh source cannot resume, so it is followed by a resync.
 */
export class LiveFeed {
  private src: Source | null = null;
  private attempt = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private closed = false;
  private fresh = false; // the connection was lost: resync on hello

  constructor(
    private readonly url: string,
    private readonly h: LiveHandlers,
    private readonly open: (url: string) => Source = (u) => new EventSource(u),
  ) {
    this.h.onState("connecting");
    this.connect();
  }

  private connect() {
    if (this.closed) return;
    const src = this.open(this.url);
    this.src = src;
    src.addEventListener("hello", () => {
      this.attempt = 0;
      this.h.onState("live");
      if (this.fresh) {
        this.fresh = false;
        this.h.onResync("reconnect");
      }
    });
    src.addEventListener("rows", (e) => {
      try {
        this.h.onRows(JSON.parse((e as MessageEvent).data) as RowsEvent);
      } catch {
        this.h.onResync("unreadable");
      }
    });
    src.addEventListener("resync", (e) => {
      let reason = "resync";
      try {
        reason = (JSON.parse((e as MessageEvent).data) as { reason?: string }).reason ?? reason;
      } catch {
        /* a resync all the same */
      }
      this.h.onResync(reason);
    });
    src.onerror = () => {
      if (this.closed) return;
      this.h.onState("reconnecting");
      // Whoever reconnects, events may have passed meanwhile (a restarted
      // server remembers none of them): resync on the next hello.
      this.fresh = true;
      if (src.readyState !== 2 /* CLOSED */) return; // the browser retries by itself
      src.close();
      this.timer = setTimeout(() => this.connect(), backoffMs(this.attempt++));
    };
  }

  close() {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.src?.close();
  }
}

/**
 * What to fetch of a rows event: the updated rows the window holds (others
 * arrive when scrolled to) and every created row (appended when the end is
 * loaded), at most 100 a request; deleted rows are removed at once.
 */
export function toFetch(e: RowsEvent, held: (id: string) => boolean): string[][] {
  const ids = [...(e.created ?? []), ...(e.updated ?? []).filter(held)];
  const out: string[][] = [];
  for (let i = 0; i < ids.length; i += 100) out.push(ids.slice(i, i + 100));
  return out;
}
