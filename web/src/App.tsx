import { useCallback, useEffect, useMemo, useState } from "react";
import { Api, ApiError, type App as AppT, type Me, type Realm, type TableSummary } from "./api";
import { messageOf } from "./messages";
import { linkClick, navigate, usePath } from "./router";
import { NotFound } from "./NotFound";
import { TableView } from "./TableView";
import { InvitePage, SetupPage } from "./admin/FirstRun";
import { Settings } from "./admin/Settings";
import { ErrorLine } from "./ErrorLine";

const realmKey = "appdor.realm";

export function AppRoot() {
  const path = usePath();
  const [me, setMe] = useState<Me | null | undefined>(undefined); // undefined: asking
  const [realm, setRealmState] = useState<string | null>(() => sessionStorage.getItem(realmKey));
  const setRealm = useCallback((id: string | null) => {
    if (id) sessionStorage.setItem(realmKey, id);
    else sessionStorage.removeItem(realmKey);
    setRealmState(id);
  }, []);
  const api = useMemo(
    () =>
      new Api({
        realm: () => sessionStorage.getItem(realmKey),
        onUnauthorized: () => setMe(null),
      }),
    [],
  );

  useEffect(() => {
    api.me().then(
      (m) => setMe(m),
      (e) => {
        if (!(e instanceof ApiError) || e.status !== 401) console.warn("appdor: session check failed", e);
        setMe(null);
      },
    );
  }, [api]);

  // A realm that this person is not a member of (any more) is forgotten.
  const realms = me?.realms ?? [];
  const current: Realm | undefined = realms.find((r) => r.id === realm) ?? (realms.length === 1 ? realms[0] : undefined);
  useEffect(() => {
    if (me && current && current.id !== realm) setRealm(current.id);
  }, [me, current, realm, setRealm]);

  const signedIn = (m: Me) => {
    setMe(m);
    if (m.realms.length === 1) setRealm(m.realms[0].id);
    else if (!m.realms.some((r) => r.id === realm)) setRealm(null);
    if (path === "/login" || path === "/setup" || path === "/invite") navigate("/", true);
  };
  const signOut = async () => {
    try {
      await api.logout();
    } catch {
      // the session may already be gone; signing out locally is what matters
    }
    setRealm(null);
    setMe(null);
    navigate("/login");
  };

  const linkToken = new URLSearchParams(location.search).get("token") ?? "";
  if (path === "/setup") return <SetupPage api={api} token={linkToken} onSignedIn={signedIn} />;
  if (path === "/invite") return <InvitePage api={api} token={linkToken} onSignedIn={signedIn} />;
  if (me === null) return <Login api={api} onSignedIn={signedIn} />;

  const tableMatch = /^\/t\/([^/]+)\/?$/.exec(path);
  // A deep link to a table starts loading before the session answers, so the
  // first rows are on screen a round trip sooner.
  const canRenderTable = tableMatch && (me === undefined ? true : current !== undefined);

  let body: React.ReactNode;
  if (me !== undefined && !current) body = <RealmPicker realms={realms} onPick={setRealm} />;
  else if (canRenderTable) body = <TableView key={tableMatch[1]} api={api} tableId={decodeURIComponent(tableMatch[1])} role={current?.role} />;
  else if (me === undefined) body = <div className="page muted">Loading…</div>;
  else if (path === "/" || path === "/login") body = <Home api={api} />;
  else if (current && me && /^\/settings(\/[a-z]*)?\/?$/.test(path))
    body = <Settings api={api} tab={path.split("/")[2] ?? ""} realm={current} userId={me.user.id} operator={!!me.user.operator} />;
  else body = <NotFound what="page" />;

  return (
    <div className="shell">
      <header className="topbar">
        <a className="brand" href="/" onClick={linkClick("/")}>
          Appdor
        </a>
        <div className="spacer" />
        {me && (
          <>
            {realms.length > 1 ? (
              <label className="realm">
                <span className="sr-only">Realm</span>
                <select value={current?.id ?? ""} onChange={(e) => (setRealm(e.target.value), navigate("/"))} aria-label="Realm">
                  {!current && <option value="">Choose a realm…</option>}
                  {realms.map((r) => (
                    <option key={r.id} value={r.id}>
                      {r.name}
                    </option>
                  ))}
                </select>
              </label>
            ) : (
              <span className="realm" title="Realm">
                {current?.name}
              </span>
            )}
            {current && (current.role === "owner" || me.user.operator) && (
              <a
                className="btn ghost"
                href={current.role === "owner" ? "/settings/members" : "/settings/realms"}
                onClick={linkClick(current.role === "owner" ? "/settings/members" : "/settings/realms")}
                aria-current={path.startsWith("/settings") ? "page" : undefined}
              >
                Settings
              </a>
            )}
            <span className="user" title="Signed in as">
              {me.user.email}
            </span>
            <button className="btn ghost" onClick={signOut}>
              Sign out
            </button>
          </>
        )}
      </header>
      <main className="main">{body}</main>
    </div>
  );
}

function Login({ api, onSignedIn }: { api: Api; onSignedIn: (m: Me) => void }) {
  const [email, setEmail] = useState("");
  const [password, setPassword] = useState("");
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  const submit = async (e: React.FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError("");
    try {
      onSignedIn(await api.login(email.trim(), password));
    } catch (err) {
      setError(err instanceof ApiError && err.status === 401 ? "That email and password do not match." : messageOf(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="login">
      <form className="card login-card" onSubmit={submit}>
        <h1>Sign in to Appdor</h1>
        <label>
          Email
          <input type="email" autoComplete="username" autoFocus required value={email} onChange={(e) => setEmail(e.target.value)} />
        </label>
        <label>
          Password
          <input type="password" autoComplete="current-password" required value={password} onChange={(e) => setPassword(e.target.value)} />
        </label>
        <ErrorLine text={error} />
        <button className="btn primary" type="submit" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
      </form>
    </div>
  );
}

function RealmPicker({ realms, onPick }: { realms: Realm[]; onPick: (id: string) => void }) {
  return (
    <div className="page narrow">
      <h1>Choose a realm</h1>
      <p className="muted">You are a member of several realms. Pick the one to work in; you can switch in the header.</p>
      <ul className="list">
        {realms.map((r) => (
          <li key={r.id}>
            <button className="row-button" onClick={() => onPick(r.id)}>
              <strong>{r.name}</strong> <span className="muted">{r.role}</span>
            </button>
          </li>
        ))}
      </ul>
    </div>
  );
}

function Home({ api }: { api: Api }) {
  const [apps, setApps] = useState<AppT[] | null>(null);
  const [tables, setTables] = useState<Record<string, TableSummary[]>>({});
  const [error, setError] = useState("");
  const [newApp, setNewApp] = useState("");

  const load = useCallback(async () => {
    try {
      const { apps } = await api.apps();
      setApps(apps);
      const lists = await Promise.all(apps.map((a) => api.tables(a.id).then((t) => [a.id, t.tables] as const)));
      setTables(Object.fromEntries(lists));
    } catch (e) {
      setError(messageOf(e));
    }
  }, [api]);
  useEffect(() => void load(), [load]);

  const act = async (fn: () => Promise<unknown>) => {
    setError("");
    try {
      await fn();
      await load();
    } catch (e) {
      setError(messageOf(e));
    }
  };

  return (
    <div className="page">
      <div className="page-head">
        <h1>Apps</h1>
        <form
          className="inline-form"
          onSubmit={(e) => {
            e.preventDefault();
            if (newApp.trim()) void act(() => api.createApp(newApp.trim())).then(() => setNewApp(""));
          }}
        >
          <input placeholder="New app name" aria-label="New app name" value={newApp} onChange={(e) => setNewApp(e.target.value)} />
          <button className="btn primary" type="submit">
            Create app
          </button>
        </form>
      </div>
      <ErrorLine text={error} />
      {apps === null && !error && <p className="muted">Loading…</p>}
      {apps?.length === 0 && <p className="muted">No apps yet. Create one to hold your tables.</p>}
      <div className="apps">
        {apps?.map((a) => (
          <section className="card app-card" key={a.id}>
            <div className="app-head">
              <EditableName name={a.name} label="app" onRename={(n) => act(() => renaming(() => api.renameApp(a.id, n)))} />
            </div>
            <ul className="list">
              {(tables[a.id] ?? []).map((t) => (
                <li key={t.id} className="table-item">
                  <a href={`/t/${t.id}`} onClick={linkClick(`/t/${t.id}`)}>
                    {t.name}
                  </a>
                  <EditableName name={t.name} label="table" hideName onRename={(n) => act(() => renaming(() => api.renameTable(t.id, n)))} />
                </li>
              ))}
            </ul>
            <NewTable onCreate={(name) => act(() => api.createTable(a.id, name, [{ name: "Name", type: "text", options: {} }]))} />
          </section>
        ))}
      </div>
    </div>
  );
}

// The server may not offer renaming apps and tables; say so plainly.
async function renaming(fn: () => Promise<unknown>) {
  try {
    return await fn();
  } catch (e) {
    if (e instanceof ApiError && (e.status === 404 || e.status === 405) && /route|method/.test(e.message + e.code))
      throw new Error("This server does not support renaming apps and tables yet.");
    throw e;
  }
}

function EditableName({ name, label, onRename, hideName }: { name: string; label: string; onRename: (n: string) => Promise<unknown>; hideName?: boolean }) {
  const [editing, setEditing] = useState(false);
  const [value, setValue] = useState(name);
  if (!editing)
    return (
      <span className="editable">
        {!hideName && <h2>{name}</h2>}
        <button className="btn ghost small" onClick={() => (setValue(name), setEditing(true))} aria-label={`Rename ${label} ${name}`}>
          Rename
        </button>
      </span>
    );
  return (
    <form
      className="inline-form"
      onSubmit={(e) => {
        e.preventDefault();
        setEditing(false);
        if (value.trim() && value.trim() !== name) void onRename(value.trim());
      }}
    >
      <input autoFocus value={value} aria-label={`New name for ${label}`} onChange={(e) => setValue(e.target.value)} onKeyDown={(e) => e.key === "Escape" && setEditing(false)} />
      <button className="btn small" type="submit">
        Save
      </button>
    </form>
  );
}

function NewTable({ onCreate }: { onCreate: (name: string) => Promise<unknown> }) {
  const [name, setName] = useState("");
  return (
    <form
      className="inline-form"
      onSubmit={(e) => {
        e.preventDefault();
        if (name.trim()) void onCreate(name.trim()).then(() => setName(""));
      }}
    >
      <input placeholder="New table name" aria-label="New table name" value={name} onChange={(e) => setName(e.target.value)} />
      <button className="btn small" type="submit">
        Add table
      </button>
    </form>
  );
}
