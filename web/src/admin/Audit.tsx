import { useCallback, useEffect, useState } from "react";
import type { Api, AuditEntry } from "../api";
import { messageOf } from "../messages";
import { when } from "./format";

const groups: { label: string; actions: string[] }[] = [
  { label: "Sign-ins", actions: ["sign_in", "sign_in_failed", "invite_accepted", "setup"] },
  { label: "Members", actions: ["member_added", "member_role_changed", "member_removed"] },
  { label: "Tokens", actions: ["token_created", "token_limit_changed", "token_revoked"] },
  { label: "Refusals", actions: ["rate_limited", "concurrency_limited"] },
  { label: "Automations", actions: ["webhook_disabled"] },
];

function describe(e: AuditEntry): string {
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

export function AuditPage({ api }: { api: Api }) {
  const [filter, setFilter] = useState<string>("");
  const [entries, setEntries] = useState<AuditEntry[]>([]);
  const [next, setNext] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);
  const [error, setError] = useState("");
  const actions = groups.find((g) => g.label === filter)?.actions ?? [];

  const load = useCallback(
    async (before: string | null) => {
      setLoading(true);
      setError("");
      try {
        const page = await api.audit(actions, before);
        setEntries((old) => (before ? [...old, ...page.entries] : page.entries));
        setNext(page.next ?? null);
      } catch (e) {
        setError(messageOf(e));
      } finally {
        setLoading(false);
      }
    },
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [api, filter],
  );
  useEffect(() => void load(null), [load]);

  return (
    <section aria-labelledby="audit-h">
      <div className="page-head">
        <h2 id="audit-h">Audit log</h2>
        <label>
          Show{" "}
          <select value={filter} onChange={(e) => setFilter(e.target.value)} aria-label="Filter the audit log">
            <option value="">everything</option>
            {groups.map((g) => (
              <option key={g.label}>{g.label}</option>
            ))}
          </select>
        </label>
      </div>
      {error && (
        <p className="error" role="alert">
          {error}
        </p>
      )}
      <table className="admin-table">
        <thead>
          <tr>
            <th>When</th>
            <th>Who</th>
            <th>What</th>
          </tr>
        </thead>
        <tbody>
          {entries.map((e) => (
            <tr key={e.id} data-action={e.action}>
              <td>{when(e.at)}</td>
              <td className="muted mono">{e.actor}</td>
              <td>{describe(e)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {!loading && entries.length === 0 && <p className="muted">Nothing here yet.</p>}
      {loading && <p className="muted">Loading…</p>}
      {next && !loading && (
        <button className="btn" onClick={() => void load(next)}>
          Older entries
        </button>
      )}
    </section>
  );
}
