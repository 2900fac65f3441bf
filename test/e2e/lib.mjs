// Shared by the browser tests and the speed measurement: build the real
// Appdor binary, give it a database of its own, seed it through the CLI and
// the public API, drive Debian's Chromium, and drop everything afterwards.
import { execFile, execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { chromium } from "playwright-core";

export const root = fileURLToPath(new URL("../..", import.meta.url));
export const screenshots = join(root, "test", "e2e", "screenshots");
const run = promisify(execFile);

function need(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`${name} is not set. Point it at a PostgreSQL / Redis the tests may use, e.g.\n` +
      `  APPDOR_TEST_DATABASE_URL=postgres://root@127.0.0.1:5432/postgres?sslmode=disable APPDOR_TEST_REDIS_URL=redis://127.0.0.1:6379/0`);
    process.exit(2);
  }
  return v;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** Builds and starts `appdor serve` on its own database; returns handles to use and stop it. */
export async function startAppdor(extraArgs = []) {
  const baseUrl = need("APPDOR_TEST_DATABASE_URL");
  const redisUrl = need("APPDOR_TEST_REDIS_URL");
  const dir = mkdtempSync(join(tmpdir(), "appdor-e2e-"));
  const bin = join(dir, "appdor");
  execFileSync("go", ["build", "-o", bin, "./cmd/appdor"], { cwd: root, stdio: "inherit" });

  const dbName = `appdor_e2e_${process.pid}_${Date.now().toString(36)}`;
  const dbUrl = new URL(baseUrl);
  dbUrl.pathname = "/" + dbName;
  const adminUrl = new URL(baseUrl);
  adminUrl.pathname = "/postgres";
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const log = [];
  const keep = (b) => {
    log.push(b.toString());
    if (log.length > 200) log.shift();
  };
  let proc = null;
  let exited = true;
  const serve = () => {
    proc = spawn(bin, ["serve", "--listen", `127.0.0.1:${port}`, "--database-url", dbUrl.href, "--redis-url", redisUrl, "--log-level", "warn", ...extraArgs], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    exited = false;
    proc.stdout.on("data", keep);
    proc.stderr.on("data", keep);
    proc.on("exit", () => (exited = true));
  };
  const halt = async () => {
    if (!exited) {
      const p = proc;
      p.kill("SIGTERM");
      await new Promise((r) => (exited ? r() : p.once("exit", r)));
    }
  };
  const ready = async () => {
    const deadline = Date.now() + 120_000;
    for (;;) {
      if (exited) throw new Error("appdor serve exited:\n" + log.join(""));
      try {
        const r = await fetch(url + "/readyz");
        if (r.ok) return;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) throw new Error("appdor serve did not become ready:\n" + log.join(""));
      await new Promise((r) => setTimeout(r, 100));
    }
  };

  const stop = async () => {
    await halt();
    try {
      await run("psql", [adminUrl.href, "-v", "ON_ERROR_STOP=1", "-qc", `DROP DATABASE IF EXISTS "${dbName}" WITH (FORCE)`]);
    } catch (e) {
      console.error(`could not drop database ${dbName}: ${e.stderr || e.message}`);
    }
    rmSync(dir, { recursive: true, force: true });
  };

  try {
    serve();
    await ready();
  } catch (e) {
    await stop();
    throw e;
  }

  /** Stops the server (SIGTERM, a graceful shutdown), runs whileDown, and starts it again on the same port and database. */
  const restart = async (whileDown = async () => {}) => {
    await halt();
    await whileDown();
    serve();
    await ready();
  };
  /** Runs a statement on the server's database as its superuser, behind the server's back. */
  const sql = (statement) => run("psql", [dbUrl.href, "-v", "ON_ERROR_STOP=1", "-qc", statement]);
  const cli = async (...args) => {
    const { stdout } = await run(bin, [...args, "--database-url", dbUrl.href, "--redis-url", redisUrl]);
    return JSON.parse(stdout.trim().split("\n").pop());
  };
  return { url, cli, stop, restart, sql, log };
}

/** A realm with one owner who can sign in, and an API token acting as that owner. */
export async function seedRealm(app, name, email, password = "correct horse battery") {
  const realm = await app.cli("realm", "create", name);
  await app.cli("user", "create", "--realm", realm.id, "--email", email, "--password", password, "--role", "owner");
  const tok = await app.cli("token", "create", "--realm", realm.id, "--user", email, "--name", "e2e seed");
  return { realm, email, password, api: client(app.url, tok.token) };
}

/** A tiny API client with a bearer token; waits out 429s as the server asks. */
export function client(base, token) {
  const call = async (method, path, body) => {
    for (let attempt = 0; ; attempt++) {
      const res = await fetch(base + path, {
        method,
        headers: { Authorization: "Bearer " + token, ...(body ? { "Content-Type": "application/json" } : {}) },
        body: body ? JSON.stringify(body) : undefined,
      });
      if ((res.status === 429 || res.status === 503) && attempt < 20) {
        const s = Number(res.headers.get("Retry-After") || "1");
        await new Promise((r) => setTimeout(r, s * 1000));
        continue;
      }
      const text = await res.text();
      if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
      return text ? JSON.parse(text) : undefined;
    }
  };
  return {
    get: (p) => call("GET", p),
    post: (p, b) => call("POST", p, b),
    patch: (p, b) => call("PATCH", p, b),
    del: (p, b) => call("DELETE", p, b),
  };
}

/** An app with one table of n rows named "Item 0001"…; returns the table and its field ids. */
export async function seedTable(api, n, { tableName = "Orders", batch = 1000 } = {}) {
  const app = await api.post("/api/v1/apps", { name: "Operations" });
  const table = await api.post(`/api/v1/apps/${app.id}/tables`, {
    name: tableName,
    fields: [
      { name: "Name", type: "text", options: {} },
      { name: "Amount", type: "number", options: { precision: 2 } },
      { name: "Done", type: "checkbox", options: {} },
      { name: "Due", type: "date", options: {} },
      { name: "Status", type: "single_select", options: { choices: ["Open", "Waiting", "Closed"] } },
      { name: "Contact", type: "email", options: {} },
    ],
  });
  const f = Object.fromEntries(table.fields.map((x) => [x.name, x.id]));
  const width = String(n).length < 4 ? 4 : String(n).length;
  const statuses = ["Open", "Waiting", "Closed"];
  for (let start = 0; start < n; start += batch) {
    const rows = [];
    for (let i = start; i < Math.min(n, start + batch); i++) {
      const k = i + 1;
      rows.push({
        cells: {
          [f.Name]: "Item " + String(k).padStart(width, "0"),
          [f.Amount]: Math.round(k * 137.5) / 100,
          [f.Done]: k % 3 === 0,
          [f.Due]: `2026-${String((k % 12) + 1).padStart(2, "0")}-${String((k % 28) + 1).padStart(2, "0")}`,
          [f.Status]: statuses[k % 3],
          [f.Contact]: `person${k}@example.com`,
        },
      });
    }
    await api.post(`/api/v1/tables/${table.id}/rows`, { rows });
  }
  return { app, table, f, width };
}

export const chromiumArgs = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
];

/** Debian's Chromium with a fresh profile (its own --user-data-dir); never a downloaded browser. */
export async function launch() {
  const profile = mkdtempSync(join(tmpdir(), "appdor-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.APPDOR_CHROMIUM ?? "/usr/bin/chromium",
    args: chromiumArgs,
    headless: true,
    viewport: { width: 1280, height: 800 },
  });
  const close = async () => {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  };
  return { context, close };
}

export function screenshotDir() {
  mkdirSync(screenshots, { recursive: true });
  return screenshots;
}

/** Sign in through the form, submitting with Enter. */
export async function signIn(page, url, who) {
  await page.goto(url + "/login");
  await page.getByLabel("Email").fill(who.email);
  await page.getByLabel("Password").fill(who.password);
  await page.getByLabel("Password").press("Enter");
  await page.getByRole("heading", { name: "Apps" }).waitFor();
}

/**
 * Select the grid's cell showing text. Glide draws on a canvas and keeps the
 * visible cells' text in an accessible table inside it; that table has no
 * layout box, so the cell is reached the way a screen reader reaches it:
 * focusing its node selects the cell in the grid.
 */
export async function focusCell(page, text, { thenCanvas = true } = {}) {
  const el = page.getByText(text, { exact: true }).first();
  await el.waitFor({ state: "attached" });
  // Focus the grid first: a grid focused with nothing selected selects its
  // first cell, which would race with the cell's own focus.
  const canvas = page.getByTestId("data-grid-canvas");
  if (!(await canvas.evaluate((c) => c.contains(document.activeElement)))) {
    await canvas.focus();
    await page.waitForFunction(() => true);
  }
  await el.focus();
  await page.waitForFunction((t) => {
    const cell = [...document.querySelectorAll('[role="gridcell"][aria-selected="true"]')];
    return cell.some((c) => c.textContent === t);
  }, text);
  // Keys then go to the canvas, as after a click, unless the test walks the
  // screen-reader path on purpose.
  if (thenCanvas) await canvas.focus();
}

/** The centre of the grid's canvas, for wheel scrolling. */
export async function gridCentre(page) {
  const box = await page.getByTestId("data-grid-canvas").boundingBox();
  return { x: box.x + box.width / 2, y: box.y + box.height / 2 };
}
