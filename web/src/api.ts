// The UI's one door to the server: the public JSON API, same origin, with
// the session cookie. It adds the realm header and, on unsafe methods, the
// CSRF token read from the appdor_csrf cookie, and turns error bodies into
// ApiError.

export interface ErrorDetail {
  row?: number;
  field?: string;
  message: string;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details: ErrorDetail[] = [],
    readonly retryAfterMs = 0,
  ) {
    super(message);
    this.name = "ApiError";
  }

  /** True when the server refused for load and asked us to come back later. */
  get retryable(): boolean {
    return this.status === 429 || this.status === 503;
  }
}

/** The wait a refusal asks for: the body's retry_after_ms, else Retry-After seconds. */
export function retryAfterMs(headers: Headers, bodyMs?: number): number {
  if (bodyMs && bodyMs > 0) return bodyMs;
  const h = headers.get("Retry-After");
  if (!h) return 0;
  const s = Number(h);
  if (Number.isFinite(s)) return Math.max(0, s * 1000);
  const at = Date.parse(h);
  return Number.isNaN(at) ? 0 : Math.max(0, at - Date.now());
}

export interface User {
  id: string;
  email: string;
  operator?: boolean;
}
export interface Realm {
  id: string;
  name: string;
  role: string;
}
export interface Me {
  user: User;
  realms: Realm[];
}
export interface App {
  id: string;
  name: string;
}
export interface TableSummary {
  id: string;
  name: string;
}
export type FieldType =
  | "text"
  | "long_text"
  | "number"
  | "checkbox"
  | "date"
  | "datetime"
  | "single_select"
  | "multi_select"
  | "email"
  | "url"
  | "link";
export interface Field {
  id: string;
  name: string;
  type: FieldType;
  options: { precision?: number; choices?: string[]; table?: string };
  position: number;
}
export interface Table {
  id: string;
  app_id: string;
  name: string;
  fields: Field[];
}
export interface Row {
  id: string;
  version: number;
  cells: Record<string, unknown>;
}
export interface RowPage {
  rows: Row[];
  next_cursor: string | null;
}
export interface RowQuery {
  sort?: string;
  filter?: string[];
  q?: string;
}

export type AutomationEvent = "row.created" | "row.updated" | "row.deleted";
export type ActionType = "webhook" | "update_row" | "create_row";
export interface AutomationAction {
  /** act_…; sent back on a change so a webhook keeps its secret. */
  id?: string;
  type: ActionType;
  url?: string;
  /** whsec_…: only in the answer that made the webhook action. */
  secret?: string;
  /** Set when the receiver answered 410 Gone; sending the action without it enables it again. */
  disabled?: boolean;
  table?: string;
  cells?: Record<string, unknown>;
}
export interface AutomationInput {
  name: string;
  enabled: boolean;
  trigger: { event: AutomationEvent; fields?: string[] };
  condition: string[];
  actions: AutomationAction[];
}
export interface Automation extends AutomationInput {
  id: string;
  table_id: string;
  created_at: string;
  updated_at: string;
}
export type RunStatus = "pending" | "succeeded" | "failed" | "dead";
export interface WebhookDelivery {
  id: string;
  url: string;
  state: "pending" | "delivered" | "failed" | "dead";
  attempts: number;
  last_status: number | null;
  last_error: string | null;
  next_attempt_at: string | null;
  delivered_at: string | null;
}
export interface AutomationRun {
  id: string;
  automation_id: string;
  event: string;
  row_ids: string[];
  hop: number;
  status: RunStatus;
  attempts: number;
  queued_at: string;
  started_at: string;
  finished_at: string | null;
  latency_ms: number | null;
  last_error: string | null;
  deliveries: WebhookDelivery[];
}
export interface RunsPage {
  runs: AutomationRun[];
  next_cursor: string | null;
}

const unsafe = new Set(["POST", "PUT", "PATCH", "DELETE"]);

export type Role = "owner" | "editor" | "viewer";
export interface Member {
  user_id: string;
  email: string;
  role: Role;
  created_at: string;
  last_sign_in_at: string | null;
  invited: boolean;
}
export interface MemberAdded extends Member {
  existing: boolean;
  invite_path?: string;
}
export interface TokenInfo {
  id: string;
  user_id: string;
  name: string;
  requests_per_minute: number | null;
  created_at: string;
  revoked_at?: string | null;
  owner_email: string;
  last_used_at: string | null;
  requests_last_hour: number;
  refused_last_hour: number;
}
export interface AuditEntry {
  id: number;
  at: string;
  actor: string;
  action: string;
  detail: Record<string, unknown>;
}
export interface UsageMinute {
  at: string;
  requests: number;
  p95_ms: number | null;
  refused: Record<string, number>;
  seats: number;
  queue_waits: number;
  mean_wait_ms: number | null;
}
export interface RealmUsage {
  id: string;
  name?: string;
  requests_last_hour: number;
  refused_last_hour: number;
  minutes: UsageMinute[];
}

export function readCookie(name: string, cookie: string): string | null {
  for (const part of cookie.split(";")) {
    const [k, ...v] = part.trim().split("=");
    if (k === name) return decodeURIComponent(v.join("="));
  }
  return null;
}

export interface ApiOptions {
  fetch?: typeof fetch;
  /** The realm the person is working in, sent as X-Appdor-Realm. */
  realm?: () => string | null;
  /** Cookie source, for the CSRF token. */
  cookie?: () => string;
  /** Called when the session is gone (401). */
  onUnauthorized?: () => void;
}

export class Api {
  private readonly f: typeof fetch;
  constructor(private readonly o: ApiOptions = {}) {
    this.f = o.fetch ?? ((...a) => fetch(...a));
  }

  async raw(method: string, path: string, body?: BodyInit, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<Response> {
    const h: Record<string, string> = { Accept: "application/json", ...headers };
    const realm = this.o.realm?.();
    if (realm) h["X-Appdor-Realm"] = realm;
    if (unsafe.has(method)) {
      const csrf = readCookie("appdor_csrf", this.o.cookie?.() ?? (typeof document === "undefined" ? "" : document.cookie));
      if (csrf) h["X-CSRF-Token"] = csrf;
    }
    const res = await this.f(path, { method, body, headers: h, credentials: "same-origin", signal });
    if (!res.ok) {
      let code = "http_" + res.status;
      let message = res.statusText || "request failed";
      let details: ErrorDetail[] = [];
      let bodyMs: number | undefined;
      try {
        const e = (await res.json())?.error;
        if (e) {
          code = e.code ?? code;
          message = e.message ?? message;
          details = Array.isArray(e.details) ? e.details : [];
          bodyMs = e.retry_after_ms;
        }
      } catch {
        // not JSON: keep the status line
      }
      if (res.status === 401) this.o.onUnauthorized?.();
      throw new ApiError(res.status, code, message, details, retryAfterMs(res.headers, bodyMs));
    }
    return res;
  }

  async json<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
    const res = await this.raw(
      method,
      path,
      body === undefined ? undefined : JSON.stringify(body),
      body === undefined ? {} : { "Content-Type": "application/json" },
      signal,
    );
    if (res.status === 204) return undefined as T;
    return (await res.json()) as T;
  }

  /**
   * A GET that waits out load refusals (429/503) a few times, as the server
   * asks, before giving up. Row pages do not use it: RowWindow has its own
   * back-off and status.
   */
  async read<T>(path: string, signal?: AbortSignal, attempts = 4): Promise<T> {
    for (let i = 1; ; i++) {
      try {
        return await this.json<T>("GET", path, undefined, signal);
      } catch (e) {
        if (!(e instanceof ApiError) || !e.retryable || i >= attempts || signal?.aborted) throw e;
        const wait = Math.min(e.retryAfterMs || 250 * 2 ** i, 10_000);
        await new Promise((r) => setTimeout(r, wait));
      }
    }
  }

  login(email: string, password: string) {
    return this.json<Me>("POST", "/api/v1/auth/login", { email, password });
  }
  logout() {
    return this.json<void>("POST", "/api/v1/auth/logout");
  }
  checkSetup(token: string) {
    return this.json<void>("GET", "/api/v1/setup?token=" + encodeURIComponent(token));
  }
  setup(token: string, realm: string, email: string, password: string) {
    return this.json<Me>("POST", "/api/v1/setup", { token, realm, email, password });
  }
  acceptInvite(token: string, password: string) {
    return this.json<Me>("POST", "/api/v1/auth/invite", { token, password });
  }
  members() {
    return this.read<{ members: Member[] }>("/api/v1/members");
  }
  addMember(email: string, role: Role, password?: string) {
    return this.json<MemberAdded>("POST", "/api/v1/members", password ? { email, role, password } : { email, role });
  }
  changeMember(user: string, role: Role) {
    return this.json<Member>("PATCH", `/api/v1/members/${user}`, { role });
  }
  removeMember(user: string) {
    return this.json<void>("DELETE", `/api/v1/members/${user}`);
  }
  tokens() {
    return this.read<{ tokens: TokenInfo[] }>("/api/v1/tokens");
  }
  createToken(name: string, rpm: number | null) {
    return this.json<TokenInfo & { token: string }>("POST", "/api/v1/tokens", { name, requests_per_minute: rpm });
  }
  setTokenLimit(id: string, rpm: number | null) {
    return this.json<TokenInfo>("PATCH", `/api/v1/tokens/${id}`, { requests_per_minute: rpm });
  }
  revokeToken(id: string) {
    return this.json<void>("DELETE", `/api/v1/tokens/${id}`);
  }
  audit(actions: string[], before: string | null) {
    const q = new URLSearchParams();
    if (actions.length) q.set("action", actions.join(","));
    if (before) q.set("before", before);
    return this.read<{ entries: AuditEntry[]; next?: string }>("/api/v1/audit?" + q.toString());
  }
  usage() {
    return this.read<{ realm: RealmUsage }>("/api/v1/usage");
  }
  operatorUsage() {
    return this.read<{ realms: RealmUsage[] }>("/api/v1/operator/usage");
  }
  me() {
    return this.read<Me>("/api/v1/me");
  }
  apps() {
    return this.read<{ apps: App[] }>("/api/v1/apps");
  }
  createApp(name: string) {
    return this.json<App>("POST", "/api/v1/apps", { name });
  }
  renameApp(id: string, name: string) {
    return this.json<App>("PATCH", `/api/v1/apps/${enc(id)}`, { name });
  }
  tables(app: string) {
    return this.read<{ tables: TableSummary[] }>(`/api/v1/apps/${enc(app)}/tables`);
  }
  createTable(app: string, name: string, fields: Omit<Field, "id" | "position">[]) {
    return this.json<Table>("POST", `/api/v1/apps/${enc(app)}/tables`, { name, fields });
  }
  renameTable(id: string, name: string) {
    return this.json<Table>("PATCH", `/api/v1/tables/${enc(id)}`, { name });
  }
  table(id: string, signal?: AbortSignal) {
    return this.read<Table>(`/api/v1/tables/${enc(id)}`, signal);
  }
  /** The rows named (at most 100), in one request; rows gone are left out. */
  rowsByIds(table: string, ids: string[]) {
    return this.json<RowPage>("GET", `/api/v1/tables/${enc(table)}/rows?ids=${ids.map(enc).join(",")}`);
  }
  /** The URL of a table's live event stream (an EventSource sends no realm header). */
  eventsUrl(table: string): string {
    const realm = this.o.realm?.();
    return `/api/v1/tables/${enc(table)}/events` + (realm ? `?realm=${enc(realm)}` : "");
  }
  rows(table: string, query: RowQuery, cursor: string | null, limit: number, signal?: AbortSignal) {
    return this.json<RowPage>("GET", `/api/v1/tables/${enc(table)}/rows?${rowParams(query, cursor, limit)}`, undefined, signal);
  }
  row(table: string, id: string) {
    return this.read<Row>(`/api/v1/tables/${enc(table)}/rows/${enc(id)}`);
  }
  createRows(table: string, rows: { cells: Record<string, unknown> }[]) {
    return this.json<{ rows: Row[] }>("POST", `/api/v1/tables/${enc(table)}/rows`, { rows });
  }
  patchRows(table: string, rows: Row[]) {
    return this.json<{ rows: Row[] }>("PATCH", `/api/v1/tables/${enc(table)}/rows`, { rows });
  }
  deleteRows(table: string, ids: string[]) {
    return this.json<void>("DELETE", `/api/v1/tables/${enc(table)}/rows`, { ids });
  }
  createField(table: string, f: Omit<Field, "id" | "position">) {
    return this.json<Field>("POST", `/api/v1/tables/${enc(table)}/fields`, f);
  }
  patchField(table: string, field: string, patch: Partial<Pick<Field, "name" | "position" | "options">>) {
    return this.json<Field>("PATCH", `/api/v1/tables/${enc(table)}/fields/${enc(field)}`, patch);
  }
  deleteField(table: string, field: string) {
    return this.json<void>("DELETE", `/api/v1/tables/${enc(table)}/fields/${enc(field)}`);
  }
  exportCsv(table: string) {
    return this.raw("GET", `/api/v1/tables/${enc(table)}/csv`, undefined, { Accept: "text/csv" });
  }
  importCsv(table: string, csv: Blob) {
    return this.raw("POST", `/api/v1/tables/${enc(table)}/csv`, csv, { "Content-Type": "text/csv" });
  }
  automations(table: string, signal?: AbortSignal) {
    return this.read<{ automations: Automation[] }>(`/api/v1/tables/${enc(table)}/automations`, signal);
  }
  createAutomation(table: string, a: AutomationInput) {
    return this.json<Automation>("POST", `/api/v1/tables/${enc(table)}/automations`, a);
  }
  patchAutomation(table: string, id: string, patch: Partial<AutomationInput>) {
    return this.json<Automation>("PATCH", `/api/v1/tables/${enc(table)}/automations/${enc(id)}`, patch);
  }
  deleteAutomation(table: string, id: string) {
    return this.json<void>("DELETE", `/api/v1/tables/${enc(table)}/automations/${enc(id)}`);
  }
  automationRuns(table: string, id: string, cursor: string | null, signal?: AbortSignal) {
    const q = cursor ? `?cursor=${enc(cursor)}` : "";
    return this.read<RunsPage>(`/api/v1/tables/${enc(table)}/automations/${enc(id)}/runs${q}`, signal);
  }
  replayRun(table: string, id: string, run: string) {
    return this.json<AutomationRun>("POST", `/api/v1/tables/${enc(table)}/automations/${enc(id)}/runs/${enc(run)}/replay`);
  }
}

function enc(s: string) {
  return encodeURIComponent(s);
}

export function rowParams(query: RowQuery, cursor: string | null, limit: number): string {
  const p = new URLSearchParams();
  p.set("limit", String(limit));
  if (cursor) p.set("cursor", cursor);
  if (query.sort) p.set("sort", query.sort);
  for (const f of query.filter ?? []) p.append("filter", f);
  if (query.q) p.set("q", query.q);
  return p.toString();
}
