import { useCallback, useEffect, useState } from "react";
import type { Api, AuditEntry } from "../api";
import { messageOf } from "../messages";
import { when } from "./format";
import { describeAudit } from "./model";
import { ErrorLine } from "../ErrorLine";

const groups: { label: string; actions: string[] }[] = [
  { label: "Sign-ins", actions: ["sign_in", "sign_in_failed", "invite_accepted", "setup"] },
  { label: "Members", actions: ["member_added", "member_role_changed", "member_removed"] },
  { label: "Tokens", actions: ["token_created", "token_limit_changed", "token_revoked"] },
  { label: "Refusals", actions: ["rate_limited", "concurrency_limited"] },
  { label: "Automations", actions: ["webhook_disabled"] },
];

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
      <ErrorLine text={error} />
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
              <td>{describeAudit(e)}</td>
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
