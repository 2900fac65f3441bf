// What the settings pages show, computed without React: the charts' series
// of a realm's hour, and an audit entry in words.
import type { AuditEntry, RealmUsage } from "../api";
import { reasonLabel } from "./format";

/** One line of a chart: a value a minute, null for none. */
export interface Series {
  label: string;
  values: (number | null)[];
  color: string;
}

const refusalColors: Record<string, string> = { rate_limited: "#c2410c", concurrency_limited: "#b91c1c", unavailable: "#7c3aed" };

/** The charts' series of a realm's hour. */
export function usageSeries(u: RealmUsage) {
  const x = u.minutes.map((m) => new Date(m.at).getTime() / 1000);
  const reasons = [...new Set(u.minutes.flatMap((m) => Object.keys(m.refused)))].sort();
  const requests: Series[] = [
    { label: "requests", values: u.minutes.map((m) => m.requests), color: "#2f6fde" },
    ...reasons.map((r) => ({ label: reasonLabel[r] ?? r, values: u.minutes.map((m) => m.refused[r] ?? 0), color: refusalColors[r] ?? "#555" })),
  ];
  const latency: Series[] = [{ label: "p95 ms", values: u.minutes.map((m) => m.p95_ms), color: "#0f766e" }];
  const seats: Series[] = [
    { label: "seats in use", values: u.minutes.map((m) => m.seats), color: "#4338ca" },
    { label: "queue waits", values: u.minutes.map((m) => m.queue_waits), color: "#a16207" },
  ];
  return { x, requests, latency, seats };
}


export function describeAudit(e: AuditEntry): string {
  const d = e.detail as Record<string, string | number | null | undefined>;
  switch (e.action) {
    case "setup":
      return `set up Appdor as ${d.email}`;
    case "sign_in":
      return `${d.email} signed in from ${d.address}`;
    case "sign_in_failed":
      return `a failed sign-in as ${d.email} from ${d.address}`;
    case "invite_accepted":
      return `${d.email} accepted their invite`;
    case "member_added":
      return `added ${d.email} as ${d.role}${d.invited ? " (invited)" : ""}`;
    case "member_role_changed":
      return `changed ${d.email} from ${d.from} to ${d.to}`;
    case "member_removed":
      return `removed ${d.email}`;
    case "token_created":
      return `created token ${d.name}${d.requests_per_minute ? ` (${d.requests_per_minute}/min)` : ""}`;
    case "token_limit_changed":
      return `set the ceiling of token ${d.name} to ${d.requests_per_minute ?? "none"}`;
    case "token_revoked":
      return `revoked token ${d.name}`;
    case "rate_limited":
      return `refusals began: ${d.scope} ceiling of ${d.limit}/min${d.token ? ` (token ${d.token})` : ""}`;
    case "concurrency_limited":
      return `refusals began: the fairness controller refused ${d.refused} requests`;
    case "webhook_disabled":
      return `a webhook answered 410 Gone and was disabled: ${d.url}`;
  }
  return JSON.stringify(e.detail);
}

