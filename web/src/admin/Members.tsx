import { useCallback, useEffect, useState } from "react";
import type { Api, Member, MemberAdded, Role } from "../api";
import { ago } from "./format";
import { CopyField } from "./CopyField";
import { useResource } from "./useResource";
import { ErrorLine } from "../ErrorLine";

const roles: Role[] = ["viewer", "editor", "owner"];

export function MembersPage({ api, me }: { api: Api; me: string }) {
  const fetch = useCallback(() => api.members().then((r) => r.members), [api]);
  const { value: members, error, act } = useResource(fetch);
  const [email, setEmail] = useState("");
  const [role, setRole] = useState<Role>("editor");
  const [withPassword, setWithPassword] = useState(false);
  const [password, setPassword] = useState("");
  const [added, setAdded] = useState<MemberAdded | null>(null);

  const add = (e: React.FormEvent) => {
    e.preventDefault();
    void act(async () => {
      const a = await api.addMember(email.trim(), role, withPassword ? password : undefined);
      setAdded(a);
      setEmail("");
      setPassword("");
      setWithPassword(false);
    });
  };

  return (
    <section aria-labelledby="members-h">
      <h2 id="members-h">Members</h2>
      <form className="admin-form" onSubmit={add} aria-label="Add a person">
        <input type="email" required placeholder="colleague@example.org" aria-label="Email" value={email} onChange={(e) => setEmail(e.target.value)} />
        <select aria-label="Role" value={role} onChange={(e) => setRole(e.target.value as Role)}>
          {roles.map((r) => (
            <option key={r}>{r}</option>
          ))}
        </select>
        <label className="check">
          <input type="checkbox" checked={withPassword} onChange={(e) => setWithPassword(e.target.checked)} /> Set an initial password
        </label>
        {withPassword && (
          <input type="password" required minLength={8} maxLength={72} autoComplete="new-password" aria-label="Initial password" placeholder="Initial password" value={password} onChange={(e) => setPassword(e.target.value)} />
        )}
        <button className="btn primary" type="submit">
          Add person
        </button>
      </form>
      {added && (
        <div className="notice" role="status">
          {added.invite_path ? (
            <>
              <p>
                <strong>{added.email}</strong> was added as {added.role}. Send them this one-time invite link (valid for 7 days); it is shown only now:
              </p>
              <CopyField label="Invite link" value={location.origin + added.invite_path} />
            </>
          ) : added.existing ? (
            <p>
              <strong>{added.email}</strong> already had an Appdor account and was added as {added.role}; they sign in with their own password.
            </p>
          ) : (
            <p>
              <strong>{added.email}</strong> was added as {added.role} with the password you set.
            </p>
          )}
          <button className="btn small" onClick={() => setAdded(null)}>
            Done
          </button>
        </div>
      )}
      <ErrorLine text={error} />
      {members === null && !error && <p className="muted">Loading…</p>}
      {members && (
        <table className="admin-table">
          <thead>
            <tr>
              <th>Email</th>
              <th>Role</th>
              <th>Last sign-in</th>
              <th>Member since</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {members.map((m) => (
              <tr key={m.user_id}>
                <td>
                  {m.email} {m.user_id === me && <span className="muted">(you)</span>} {m.invited && <span className="badge">invited</span>}
                </td>
                <td>
                  <RoleEditor member={m} onSave={(r) => act(() => api.changeMember(m.user_id, r))} />
                </td>
                <td>{ago(m.last_sign_in_at)}</td>
                <td>{ago(m.created_at)}</td>
                <td>
                  <button
                    className="btn small danger"
                    aria-label={`Remove ${m.email}`}
                    onClick={() => confirm(`Remove ${m.email} from this realm? Their tokens are revoked at once.`) && void act(() => api.removeMember(m.user_id))}
                  >
                    Remove
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

// A member's role: chosen, then saved with a button, so that moving through
// the choices with the keyboard changes nothing by itself.
function RoleEditor({ member, onSave }: { member: Member; onSave: (r: Role) => Promise<unknown> }) {
  const [role, setRole] = useState<Role>(member.role);
  useEffect(() => setRole(member.role), [member.role]);
  return (
    <form
      className="inline-form"
      onSubmit={(e) => {
        e.preventDefault();
        void onSave(role);
      }}
    >
      <select aria-label={`Role of ${member.email}`} value={role} onChange={(e) => setRole(e.target.value as Role)}>
        {roles.map((r) => (
          <option key={r}>{r}</option>
        ))}
      </select>
      {role !== member.role && (
        <button className="btn small" type="submit">
          Save
        </button>
      )}
    </form>
  );
}
