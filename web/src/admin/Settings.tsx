import type { Api, Realm } from "../api";
import { linkClick } from "../router";
import { AuditPage } from "./Audit";
import { MembersPage } from "./Members";
import { TokensPage } from "./Tokens";
import { OperatorPage, UsagePage } from "./Usage";

export const settingsTabs = [
  { path: "members", label: "Members" },
  { path: "tokens", label: "Tokens" },
  { path: "usage", label: "Usage" },
  { path: "audit", label: "Audit log" },
] as const;

// The settings area: a realm's members, tokens, usage and audit log for its
// owners, and every realm's usage for operators.
export function Settings({ api, tab, realm, userId, operator }: { api: Api; tab: string; realm: Realm; userId: string; operator: boolean }) {
  const owner = realm.role === "owner";
  const tabs = [...(owner ? settingsTabs : []), ...(operator ? [{ path: "realms", label: "All realms" }] : [])];
  let body: React.ReactNode;
  if (!tabs.some((t) => t.path === tab))
    body = <p className="muted">{owner || operator ? "Choose a page above." : "Only the realm's owners manage its members, tokens and audit log."}</p>;
  else if (tab === "members") body = <MembersPage api={api} me={userId} />;
  else if (tab === "tokens") body = <TokensPage api={api} />;
  else if (tab === "usage") body = <UsagePage api={api} />;
  else if (tab === "audit") body = <AuditPage api={api} />;
  else body = <OperatorPage api={api} />;
  return (
    <div className="page settings">
      <h1>Settings · {realm.name}</h1>
      {tabs.length > 0 && (
        <nav className="tabs" aria-label="Settings">
          {tabs.map((t) => (
            <a key={t.path} href={`/settings/${t.path}`} aria-current={t.path === tab ? "page" : undefined} onClick={linkClick(`/settings/${t.path}`)}>
              {t.label}
            </a>
          ))}
        </nav>
      )}
      {body}
    </div>
  );
}
