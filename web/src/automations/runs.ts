// The run log's data: pages of runs, newest first, refreshed from the top
// while older pages stay loaded.

import type { AutomationRun, RunsPage } from "../api";

export interface RunList {
  runs: AutomationRun[];
  /** The cursor of the next (older) page, or null at the end. */
  cursor: string | null;
}

/**
 * The list after a fresh first page: its runs replace the newest ones, and
 * the older runs already loaded stay when the fresh page reaches them. Run
 * ids are UUIDv7 and the log is ordered by id, so ids compare as times.
 * When the fresh page does not reach them (more new runs than a page), the
 * older runs are dropped, so the list never has a gap.
 */
export function refreshed(list: RunList | null, fresh: RunsPage): RunList {
  if (!list || fresh.runs.length === 0 || fresh.next_cursor === null) return { runs: fresh.runs, cursor: fresh.next_cursor };
  const oldest = fresh.runs[fresh.runs.length - 1].id;
  const overlaps = list.runs.some((r) => r.id >= oldest);
  if (!overlaps) return { runs: fresh.runs, cursor: fresh.next_cursor };
  const older = list.runs.filter((r) => r.id < oldest);
  return { runs: [...fresh.runs, ...older], cursor: older.length ? list.cursor : fresh.next_cursor };
}

/** The list with an older page appended. */
export function appended(list: RunList, page: RunsPage): RunList {
  const seen = new Set(list.runs.map((r) => r.id));
  return { runs: [...list.runs, ...page.runs.filter((r) => !seen.has(r.id))], cursor: page.next_cursor };
}

/** The list with one run replaced by its newer copy (a replay's answer). */
export function withRun(list: RunList, run: AutomationRun): RunList {
  return { ...list, runs: list.runs.map((r) => (r.id === run.id ? run : r)) };
}

/** A replay sends a run's failed and dead deliveries again; a run without one has nothing to replay. */
export function canReplay(r: AutomationRun): boolean {
  return r.deliveries.some((d) => d.state === "failed" || d.state === "dead");
}

export function latencyText(ms: number | null): string {
  if (ms === null) return "—";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3_600_000) return `${Math.round(ms / 60_000)} min`;
  return `${(ms / 3_600_000).toFixed(1)} h`;
}

export function timeText(iso: string | null): string {
  if (!iso) return "";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
