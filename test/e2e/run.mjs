// Browser tests: the real binary, its own database, Debian's Chromium.
//   APPDOR_TEST_DATABASE_URL=… APPDOR_TEST_REDIS_URL=… npm run test:e2e
import { join } from "node:path";
import { focusCell, gridCentre, launch, screenshotDir, seedRealm, seedTable, signIn, startAppdor } from "./lib.mjs";
import { automationTests } from "./automations.mjs";
import { liveTests } from "./live.mjs";
import { adminTests } from "./admin.mjs";

const shots = screenshotDir();
const tests = [];
const test = (name, fn) => tests.push({ name, fn });
// `npm run test:e2e -- automation` runs only the tests whose name has that text.
const only = process.argv.slice(2).join(" ").toLowerCase();

function expect(cond, msg) {
  if (!cond) throw new Error(msg);
}

// Console errors fail a test, except the browser's own line for an HTTP
// error status the test provokes on purpose.
function watchConsole(page, allowedStatuses, allowedErrors = []) {
  const errors = [];
  page.on("pageerror", (e) => errors.push("page error: " + e.message));
  page.on("console", (m) => {
    if (m.type() !== "error") return;
    const status = /status of (\d{3})/.exec(m.text());
    if (status && allowedStatuses.includes(Number(status[1]))) return;
    if (allowedErrors.some((re) => re.test(m.text()))) return;
    errors.push("console error: " + m.text());
  });
  return () => expect(errors.length === 0, errors.join("\n"));
}

async function openTable(page, url, tableId, firstCell) {
  await page.goto(`${url}/t/${tableId}`);
  await page.getByText(firstCell, { exact: true }).first().waitFor({ state: "attached" });
}

async function editCell(page, text, typed, opts) {
  await focusCell(page, text, opts);
  await page.keyboard.press("Enter"); // open the editor on the selected cell
  await page.waitForFunction(() => document.activeElement?.classList.contains("gdg-input"));
  await page.keyboard.press("ControlOrMeta+A");
  await page.keyboard.type(typed, { delay: 10 });
  // Let the editor's state catch up with the last key, as it does for a person.
  await page.waitForFunction((t) => document.activeElement?.value === t, typed);
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => document.querySelector(".gdg-input") === null); // the editor is gone
}

// Webhooks of the automation tests go to a receiver on loopback, which the
// SSRF guard refuses unless allowed.
const app = await startAppdor(["--webhook-allow-cidrs", "127.0.0.1/32"]);
let passed = 0;
let failed = 0;
try {
  const a = await seedRealm(app, "Finance", "ann@finance.example");
  const b = await seedRealm(app, "Legal", "bob@legal.example");
  const { table, f } = await seedTable(a.api, 2000);
  const rowsByName = async () => {
    const out = new Map();
    let cursor = "";
    do {
      const page = await a.api.get(`/api/v1/tables/${table.id}/rows?limit=1000${cursor ? "&cursor=" + cursor : ""}`);
      for (const r of page.rows) out.set(r.cells[f.Name], r);
      cursor = page.next_cursor;
    } while (cursor);
    return out;
  };
  const initial = await rowsByName();

  test("sign in, open a 2,000-row table, see its cells, edit one, reload, the edit is kept", async (page) => {
    const check = watchConsole(page, [401]);
    await page.goto(app.url + "/");
    await page.getByRole("heading", { name: "Sign in to Appdor" }).waitFor();
    await page.screenshot({ path: join(shots, "00-sign-in.png") });
    await signIn(page, app.url, a);
    await page.getByRole("link", { name: "Orders" }).waitFor();
    await page.screenshot({ path: join(shots, "00-apps.png") });
    await page.getByRole("link", { name: "Orders" }).click();
    await page.getByText("Item 0001", { exact: true }).waitFor({ state: "attached" });
    expect(page.url().endsWith(`/t/${table.id}`), "the table has a deep link: " + page.url());
    await page.getByText("Finance", { exact: true }).waitFor();
    await page.getByText(a.email, { exact: true }).waitFor();
    await page.getByText("person2@example.com", { exact: true }).waitFor({ state: "attached" });
    await page.screenshot({ path: join(shots, "01-table-2000.png") });

    // Scroll to the end: the window loads page after page, then knows the count.
    const grid = await gridCentre(page);
    for (let i = 0; i < 400; i++) {
      if ((await page.getByText("Item 2000", { exact: true }).count()) > 0) break;
      await page.mouse.move(grid.x, grid.y);
      await page.mouse.wheel(0, 4000);
      await page.waitForTimeout(30);
    }
    await page.getByText("Item 2000", { exact: true }).waitFor({ state: "attached" });
    expect(!(await page.locator(".statusbar").textContent()).includes("more below"), "the end of the table was reached");
    await page.screenshot({ path: join(shots, "02-table-end.png") });

    await editCell(page, "Item 1998", "Edited 1998");
    await page.getByText("Edited 1998", { exact: true }).waitFor({ state: "attached" });
    await page.getByText("All changes saved").waitFor();
    const saved = await a.api.get(`/api/v1/tables/${table.id}/rows/${initial.get("Item 1998").id}`);
    expect(saved.cells[f.Name] === "Edited 1998", "the server has the edit: " + JSON.stringify(saved.cells));

    await editCell(page, "Item 1997", "Edited 1997");
    await page.getByText("Edited 1997", { exact: true }).waitFor({ state: "attached" });
    await page.getByText("All changes saved").waitFor();
    await page.reload();
    await page.getByText("Item 0001", { exact: true }).waitFor({ state: "attached" });
    for (let i = 0; i < 400 && (await page.getByText("Edited 1997", { exact: true }).count()) === 0; i++) {
      await page.mouse.move(grid.x, grid.y);
      await page.mouse.wheel(0, 4000);
      await page.waitForTimeout(30);
    }
    await page.getByText("Edited 1997", { exact: true }).waitFor({ state: "attached" });
    await page.getByText("Edited 1998", { exact: true }).waitFor({ state: "attached" });
    await page.screenshot({ path: join(shots, "03-after-reload.png") });
    check();
  });

  test("a user of another realm opening the table's link sees not found", async (page) => {
    const check = watchConsole(page, [401, 404]);
    await signIn(page, app.url, b);
    await page.goto(`${app.url}/t/${table.id}`);
    await page.getByRole("heading", { name: "Not found" }).waitFor();
    expect((await page.getByText("Item 0001", { exact: true }).count()) === 0, "no cell of the other realm is shown");
    await page.screenshot({ path: join(shots, "04-other-realm-not-found.png") });
    check();
  });

  test("someone else changed the row: 409 shows their value and keeps mine to apply", async (page) => {
    const check = watchConsole(page, [401, 409]);
    await signIn(page, app.url, a);
    await openTable(page, app.url, table.id, "Item 0005");
    const row = initial.get("Item 0005");
    // The editor opens from the accessible table (the screen-reader path);
    // while it is open, someone else changes the row. Live updates do not
    // change the row under the editor: they say so, and the edit, made on the
    // version it started from, meets the 409.
    await focusCell(page, "Item 0005", { thenCanvas: false });
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => document.activeElement?.classList.contains("gdg-input"));
    const cur = await a.api.get(`/api/v1/tables/${table.id}/rows/${row.id}`);
    await a.api.patch(`/api/v1/tables/${table.id}/rows`, { rows: [{ id: row.id, version: cur.version, cells: { [f.Name]: "Theirs 0005" } }] });
    await page.locator(".notice", { hasText: "Someone else changed the row you are editing" }).waitFor();
    await page.keyboard.press("ControlOrMeta+A");
    await page.keyboard.type("Mine 0005", { delay: 10 });
    await page.waitForFunction((t) => document.activeElement?.value === t, "Mine 0005");
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => document.querySelector(".gdg-input") === null);
    const notice = page.locator(".notice.conflict");
    await notice.waitFor();
    const text = await notice.textContent();
    expect(/someone else changed this row/i.test(text), "the notice says someone else changed it: " + text);
    expect(text.includes("Theirs 0005") && text.includes("Mine 0005"), "the notice shows both values: " + text);
    await page.getByText("Theirs 0005", { exact: true }).first().waitFor({ state: "attached" });
    await page.screenshot({ path: join(shots, "05-conflict.png") });

    await notice.getByRole("button", { name: "Use mine" }).click();
    await page.getByText("All changes saved").waitFor();
    const after = await a.api.get(`/api/v1/tables/${table.id}/rows/${row.id}`);
    expect(after.cells[f.Name] === "Mine 0005", "my value was applied on top of theirs: " + after.cells[f.Name]);
    check();
  });

  test("a 429 on saving waits Retry-After, says so, keeps the grid usable, then saves", async (page) => {
    const check = watchConsole(page, [401, 429]);
    await signIn(page, app.url, a);
    await openTable(page, app.url, table.id, "Item 0007");
    // The browser answers the first save with the server's own 429 shape; the
    // real limiter's refusals are tested against the server in Go.
    let refused = 0;
    await page.route(`**/api/v1/tables/${table.id}/rows`, async (route) => {
      if (route.request().method() === "PATCH" && refused++ === 0) {
        return route.fulfill({
          status: 429,
          headers: { "Retry-After": "2", "Content-Type": "application/json" },
          body: JSON.stringify({ error: { code: "rate_limited", message: "too many requests", retry_after_ms: 2000 } }),
        });
      }
      return route.continue();
    });
    await editCell(page, "Item 0007", "Later 0007");
    await page.getByText(/Server busy; your changes are kept and will be saved in 2 s/).waitFor();
    await editCell(page, "Item 0008", "Also 0008"); // the grid is not blocked meanwhile
    await page.screenshot({ path: join(shots, "07-rate-limited.png") });
    await page.getByText("All changes saved").waitFor();
    for (const [name, want] of [["Item 0007", "Later 0007"], ["Item 0008", "Also 0008"]]) {
      const row = await a.api.get(`/api/v1/tables/${table.id}/rows/${initial.get(name).id}`);
      expect(row.cells[f.Name] === want, `${name} saved after the wait: ${row.cells[f.Name]}`);
    }
    expect(refused >= 2, "the save was retried");

    // Search is bound to the API's q.
    await page.getByLabel("Search rows").fill("Later");
    await page.locator(".statusbar").getByText("1 row", { exact: true }).waitFor();
    await page.getByText("Later 0007", { exact: true }).waitFor({ state: "attached" });
    check();
  });

  test("filter, sort, add, rename, move and delete a field, export and import CSV through the toolbar", async (page) => {
    const check = watchConsole(page, [401]);
    await signIn(page, app.url, a);
    await openTable(page, app.url, table.id, "Item 0001");

    await page.getByRole("button", { name: "Filter" }).click();
    await page.getByLabel("Filter field").selectOption({ label: "Status" });
    await page.getByLabel("Filter operator").selectOption("eq");
    await page.getByLabel("Filter value").fill("Closed");
    await page.getByRole("button", { name: "Add filter" }).click();
    await page.getByText("Status eq Closed").waitFor();
    // Row 47 is Closed: off screen before the filter, near the top after it.
    await page.getByText("Item 0047", { exact: true }).waitFor({ state: "attached" });
    expect((await page.getByText("Item 0001", { exact: true }).count()) === 0, "the filter hides rows that do not match");
    await page.screenshot({ path: join(shots, "08-filtered.png") });
    await page.getByRole("button", { name: "Remove filter" }).click();
    await page.getByText("Item 0001", { exact: true }).waitFor({ state: "attached" });

    // Sort is bound to the API's sort: by Amount, largest first.
    await page.getByLabel("Sort").selectOption({ label: "Amount ↓" });
    await page.getByText("Sorted by Amount ↓").waitFor();
    await page.getByText("Item 2000", { exact: true }).waitFor({ state: "attached" });
    expect((await page.getByText("Item 0001", { exact: true }).count()) === 0, "the smallest amounts are not on top");
    await page.getByRole("button", { name: "Remove sort" }).click();
    await page.getByText("Item 0001", { exact: true }).waitFor({ state: "attached" });

    await page.getByRole("button", { name: "Add field" }).click();
    await page.getByLabel("Field name").fill("Notes");
    await page.getByLabel("Field type").selectOption("long_text");
    await page.getByRole("button", { name: "Create field" }).click();
    await page.locator("th[role=columnheader]", { hasText: "Notes" }).waitFor({ state: "attached" });
    const meta = await a.api.get(`/api/v1/tables/${table.id}`);
    expect(meta.fields.some((x) => x.name === "Notes" && x.type === "long_text"), "the field was created");

    // Rename, move and delete it from the Fields panel, by keyboard-reachable controls.
    await page.getByRole("button", { name: "Fields", exact: true }).click();
    await page.getByLabel("Name of Notes").fill("Remarks");
    await page.getByLabel("Name of Notes").press("Enter");
    await page.getByLabel("Name of Remarks").waitFor();
    await page.getByRole("button", { name: "Move Remarks left" }).click();
    await page.waitForFunction(() => [...document.querySelectorAll("th[role=columnheader]")].map((t) => t.textContent).join("|").includes("Remarks|Contact"));
    await page.screenshot({ path: join(shots, "09-fields.png") });
    page.once("dialog", (d) => d.accept());
    await page.getByRole("button", { name: "Delete Remarks" }).click();
    await page.getByLabel("Name of Remarks").waitFor({ state: "detached" });
    const after = await a.api.get(`/api/v1/tables/${table.id}`);
    expect(!after.fields.some((x) => x.name === "Remarks" || x.name === "Notes"), "the field was deleted");
    await page.getByRole("button", { name: "Close" }).click();

    const [download] = await Promise.all([page.waitForEvent("download"), page.getByRole("button", { name: "Export CSV" }).click()]);
    const { readFile } = await import("node:fs/promises");
    const csv = await readFile(await download.path(), "utf8");
    expect(csv.split("\n")[0].includes("Name") && csv.includes("Item 0002"), "the export has the header and rows: " + csv.slice(0, 120));

    await page.locator('input[type="file"]').setInputFiles({ name: "more.csv", mimeType: "text/csv", buffer: Buffer.from("Name,Status\nImported row,Open\n") });
    await page.getByText("Imported more.csv.").waitFor();
    await page.getByLabel("Search rows").fill("Imported");
    await page.getByText("Imported row", { exact: true }).waitFor({ state: "attached" });
    check();
  });

  test("an invalid value (422) marks the cell, says why and keeps what was typed", async (page) => {
    const check = watchConsole(page, [401, 422]);
    await signIn(page, app.url, a);
    await openTable(page, app.url, table.id, "person3@example.com");
    await editCell(page, "person3@example.com", "not an email");
    const notice = page.locator(".notice.error");
    await notice.waitFor();
    expect((await notice.textContent()).includes("not an email"), "the notice keeps the typed value");
    await page.getByText("not an email", { exact: true }).first().waitFor({ state: "attached" });
    await page.screenshot({ path: join(shots, "06-invalid.png") });
    const row = await a.api.get(`/api/v1/tables/${table.id}/rows/${initial.get("Item 0003").id}`);
    expect(row.cells[f.Contact] === "person3@example.com", "the server kept the valid value");
    check();
  });

  automationTests({ test, expect, watchConsole, openTable, editCell, app, realm: a, table, f, shots });
  adminTests({ test, expect, watchConsole, shots });
  liveTests({ test, expect, watchConsole, openTable, editCell, app, realm: a, other: b, table, f });

  for (const t of tests) {
    if (only && !t.name.toLowerCase().includes(only)) continue;
    const { context, close } = await launch();
    const page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(30_000);
    const started = Date.now();
    try {
      await t.fn(page);
      passed++;
      console.log(`ok   ${t.name} (${Date.now() - started} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${t.name}\n     ${String(e?.stack ?? e).split("\n").join("\n     ")}`);
      await page.screenshot({ path: join(shots, "failed-" + tests.indexOf(t) + ".png") }).catch(() => {});
    } finally {
      await close();
    }
  }
} catch (e) {
  failed++;
  console.log("FAIL setup: " + (e?.stack ?? e));
} finally {
  await app.stop();
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
