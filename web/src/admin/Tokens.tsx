import { useCallback, useEffect, useState } from "react";
import type { Api } from "../api";
import { ago } from "./format";
import { CopyField } from "./CopyField";
import { useResource } from "./useResource";
import { ErrorLine } from "../ErrorLine";

function parseRpm(s: string): number | null {
  const t = s.trim();
  return t === "" ? null : Number(t);
}

export function TokensPage({ api }: { api: Api }) {
  // Polled: use and refusals move.
  const fetch = useCallback(() => api.tokens().then((r) => r.tokens), [api]);
  const { value: tokens, error, act } = useResource(fetch, 10_000);
  const [name, setName] = useState("");
  const [rpm, setRpm] = useState("60");
  const [secret, setSecret] = useState<{ name: string; token: string } | null>(null);

  const create = (e: React.FormEvent) => {
    e.preventDefault();
    void act(async () => {
      const t = await api.createToken(name.trim(), parseRpm(rpm));
      setSecret({ name: t.name, token: t.token });
      setName("");
    });
  };

  return (
    <section aria-labelledby="tokens-h">
      <h2 id="tokens-h">API tokens</h2>
      <p className="muted">A token acts as you, in this realm, for scripts and agents. Its ceiling is in requests per minute; empty means the realm's.</p>
      <form className="admin-form" onSubmit={create} aria-label="Create a token">
        <input required maxLength={200} placeholder="Token name, e.g. nightly sync" aria-label="Token name" value={name} onChange={(e) => setName(e.target.value)} />
        <input type="number" min={1} max={1000000} placeholder="no ceiling" aria-label="Requests per minute" value={rpm} onChange={(e) => setRpm(e.target.value)} />
        <span className="muted">requests / minute</span>
        <button className="btn primary" type="submit">
          Create token
        </button>
      </form>
      {secret && (
        <div className="notice" role="status">
          <p>
            The secret of <strong>{secret.name}</strong>, shown only now. Use it as <code>Authorization: Bearer …</code>:
          </p>
          <CopyField label="Token secret" value={secret.token} />
          <button className="btn small" onClick={() => setSecret(null)}>
            Done
          </button>
        </div>
      )}
      <ErrorLine text={error} />
      {tokens === null && !error && <p className="muted">Loading…</p>}
      {tokens?.length === 0 && <p className="muted">No tokens yet.</p>}
      {tokens && tokens.length > 0 && (
        <table className="admin-table">
          <thead>
            <tr>
              <th>Name</th>
              <th>Owner</th>
              <th>Ceiling / min</th>
              <th>Created</th>
              <th>Last used</th>
              <th className="num">Requests, last hour</th>
              <th className="num">Refused, last hour</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {tokens.map((t) => (
              <tr key={t.id} className={t.revoked_at ? "revoked" : undefined} data-token={t.name}>
                <td>
                  {t.name} {t.revoked_at && <span className="badge">revoked</span>}
                </td>
                <td>{t.owner_email}</td>
                <td>
                  {t.revoked_at ? (
                    t.requests_per_minute ?? "—"
                  ) : (
                    <CeilingEditor value={t.requests_per_minute} label={t.name} onSave={(v) => act(() => api.setTokenLimit(t.id, v))} />
                  )}
                </td>
                <td>{ago(t.created_at)}</td>
                <td>{ago(t.last_used_at)}</td>
                <td className="num">{t.requests_last_hour}</td>
                <td className={"num" + (t.refused_last_hour > 0 ? " warn" : "")} data-refused>
                  {t.refused_last_hour}
                </td>
                <td>
                  {!t.revoked_at && (
                    <button className="btn small danger" aria-label={`Revoke ${t.name}`} onClick={() => confirm(`Revoke ${t.name}? Scripts using it stop at once.`) && void act(() => api.revokeToken(t.id))}>
                      Revoke
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

function CeilingEditor({ value, label, onSave }: { value: number | null; label: string; onSave: (v: number | null) => Promise<unknown> }) {
  const [v, setV] = useState(value === null ? "" : String(value));
  useEffect(() => setV(value === null ? "" : String(value)), [value]);
  const changed = v !== (value === null ? "" : String(value));
  return (
    <form
      className="inline-form"
      onSubmit={(e) => {
        e.preventDefault();
        void onSave(parseRpm(v));
      }}
    >
      <input className="narrow-input" type="number" min={1} max={1000000} placeholder="none" aria-label={`Ceiling of ${label}`} value={v} onChange={(e) => setV(e.target.value)} />
      {changed && (
        <button className="btn small" type="submit">
          Save
        </button>
      )}
    </form>
  );
}
