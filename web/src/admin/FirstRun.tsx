import { useEffect, useState } from "react";
import { ApiError, type Api, type Me } from "../api";
import { messageOf } from "../messages";
import { ErrorLine } from "../ErrorLine";

// The first run: the page behind the setup link `appdor serve` logs when
// nobody can sign in yet. It makes the first realm and its owner.
export function SetupPage({ api, token, onSignedIn }: { api: Api; token: string; onSignedIn: (m: Me) => void }) {
  const [valid, setValid] = useState<boolean | undefined>(undefined);
  const [realm, setRealm] = useState("");
  const [email, setEmail] = useState("");
  const [password, setPassword] = useState("");
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    api.checkSetup(token).then(
      () => setValid(true),
      () => setValid(false),
    );
  }, [api, token]);
  if (valid === undefined) return <div className="page muted">Loading…</div>;
  if (!valid)
    return (
      <div className="login">
        <div className="card login-card">
          <h1>This setup link is spent</h1>
          <p className="muted">Appdor is set up already, or the server restarted and logged a new link. Sign in instead.</p>
          <a className="btn primary" href="/login">
            Sign in
          </a>
        </div>
      </div>
    );
  const submit = async (e: React.FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError("");
    try {
      onSignedIn(await api.setup(token, realm.trim(), email.trim(), password));
    } catch (err) {
      setError(messageOf(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="login">
      <form className="card login-card" onSubmit={submit}>
        <h1>Set up Appdor</h1>
        <p className="muted">Create the first realm — your department's space — and its owner. The owner administers this Appdor.</p>
        <label>
          Realm name
          <input autoFocus required maxLength={200} value={realm} onChange={(e) => setRealm(e.target.value)} placeholder="e.g. Operations" />
        </label>
        <label>
          Your email
          <input type="email" autoComplete="username" required value={email} onChange={(e) => setEmail(e.target.value)} />
        </label>
        <label>
          Password (8 to 72 characters)
          <input type="password" autoComplete="new-password" required minLength={8} maxLength={72} value={password} onChange={(e) => setPassword(e.target.value)} />
        </label>
        <ErrorLine text={error} />
        <button className="btn primary" type="submit" disabled={busy}>
          {busy ? "Setting up…" : "Create realm and owner"}
        </button>
      </form>
    </div>
  );
}

// An invite link: the person added without a password sets one.
export function InvitePage({ api, token, onSignedIn }: { api: Api; token: string; onSignedIn: (m: Me) => void }) {
  const [password, setPassword] = useState("");
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  const submit = async (e: React.FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError("");
    try {
      onSignedIn(await api.acceptInvite(token, password));
    } catch (err) {
      setError(err instanceof ApiError && err.status === 404 ? "This invite link was used already, has expired or was withdrawn. Ask for a new one." : messageOf(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="login">
      <form className="card login-card" onSubmit={submit}>
        <h1>Welcome to Appdor</h1>
        <p className="muted">Choose your password to accept the invite.</p>
        <label>
          Password (8 to 72 characters)
          <input type="password" autoFocus autoComplete="new-password" required minLength={8} maxLength={72} value={password} onChange={(e) => setPassword(e.target.value)} />
        </label>
        <ErrorLine text={error} />
        <button className="btn primary" type="submit" disabled={busy}>
          {busy ? "Signing in…" : "Set password and sign in"}
        </button>
      </form>
    </div>
  );
}
