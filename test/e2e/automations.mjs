// Browser tests of the Automations panel: made in the UI, fired by an edit in
// the grid, delivered to a receiver this test runs on 127.0.0.1, and seen in
// the run log.
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";
import { join } from "node:path";
import { signIn } from "./lib.mjs";

/** A webhook receiver on loopback: records each request; /gone answers 410 the first time. */
async function startSink() {
  const got = [];
  let gone = 0;
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      got.push({ path: req.url, headers: req.headers, body: Buffer.concat(chunks).toString("utf8") });
      const status = req.url === "/gone" && gone++ === 0 ? 410 : 204;
      res.writeHead(status).end();
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${server.address().port}`;
  const wait = async (path, n = 1, ms = 30_000) => {
    const until = Date.now() + ms;
    while (got.filter((g) => g.path === path).length < n) {
      if (Date.now() > until) throw new Error(`the receiver got ${got.filter((g) => g.path === path).length} of ${n} requests to ${path}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    return got.filter((g) => g.path === path);
  };
  return { url, got, wait, close: () => new Promise((r) => server.close(r)) };
}

/** Standard Webhooks: v1,base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")), key the base64 after whsec_. */
function signatureHolds(secret, req) {
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  const want = createHmac("sha256", key).update(`${req.headers["webhook-id"]}.${req.headers["webhook-timestamp"]}.${req.body}`).digest();
  return String(req.headers["webhook-signature"] ?? "")
    .split(" ")
    .some((s) => {
      const got = Buffer.from(s.replace(/^v1,/, ""), "base64");
      return got.length === want.length && timingSafeEqual(got, want);
    });
}

export function automationTests({ test, expect, watchConsole, openTable, editCell, app, realm: a, table, f, shots }) {
  const automationsOf = async () => (await a.api.get(`/api/v1/tables/${table.id}/automations`)).automations;

  test("automations: a webhook made in the panel shows its secret once, fires on a grid edit and its delivery is in the run log", async (page) => {
    const check = watchConsole(page, [401, 422]);
    const sink = await startSink();
    try {
      await page.context().grantPermissions(["clipboard-read", "clipboard-write"], { origin: app.url });
      await signIn(page, app.url, a);
      await openTable(page, app.url, table.id, "Item 0001");
      await page.getByRole("button", { name: "Automations" }).click();
      const drawer = page.locator(".drawer");
      await drawer.getByText(/No automations on this table yet/).waitFor();
      // The drawer takes the keyboard's focus and Escape closes it.
      await page.waitForFunction(() => document.activeElement?.id === "automations-title");
      await page.keyboard.press("Escape");
      await drawer.waitFor({ state: "detached" });
      await page.getByRole("button", { name: "Automations" }).click();

      await drawer.getByRole("button", { name: "New automation" }).click();
      await drawer.getByRole("textbox", { name: "Name", exact: true }).fill("Notify sink");
      await drawer.getByLabel("When").selectOption("row.updated");
      await drawer.getByRole("checkbox", { name: "Name", exact: true }).check();
      await drawer.getByRole("button", { name: "Add condition" }).click();
      await drawer.getByLabel("Condition 1 field").selectOption({ label: "Due" });
      await drawer.getByLabel("Condition 1 operator").selectOption("eq");
      await drawer.getByLabel("Condition 1 value").fill("soon");
      await drawer.getByLabel("Webhook URL").fill("not a url");
      await drawer.getByRole("button", { name: "Create automation" }).click();
      // The form's own check: the URL.
      await drawer.locator(".form-errors").getByText("Action 1, URL:").waitFor();
      await drawer.getByLabel("Webhook URL").fill(sink.url + "/hook");
      await drawer.getByRole("button", { name: "Create automation" }).click();
      // The server's check (422): a date condition needs a date.
      const errors = drawer.locator(".form-errors");
      await errors.getByText("Conditions:").waitFor();
      expect(/date/i.test(await errors.textContent()), "the 422 says why: " + (await errors.textContent()));
      await page.screenshot({ path: join(shots, "10-automation-422.png") });
      await drawer.getByLabel("Condition 1 field").selectOption({ label: "Name" });
      await drawer.getByLabel("Condition 1 operator").selectOption("contains");
      await drawer.getByLabel("Condition 1 value").fill("Hooked");
      await drawer.getByRole("button", { name: "Create automation" }).click();

      // The secret, once, with a copy button.
      const notice = drawer.locator(".secret-notice");
      await notice.getByText(/You will not see it again/).waitFor();
      const secret = await notice.getByLabel(/Signing secret for/).inputValue();
      expect(/^whsec_[A-Za-z0-9+/=]{40,}$/.test(secret), "a whsec_ secret is shown: " + secret);
      await notice.getByRole("button", { name: "Copy" }).click();
      await notice.getByText("Copied").waitFor();
      expect((await page.evaluate(() => navigator.clipboard.readText())) === secret, "the secret is on the clipboard");
      await page.screenshot({ path: join(shots, "11-automation-secret.png") });
      await notice.getByRole("button", { name: "I have stored it" }).click();
      await notice.waitFor({ state: "detached" });
      expect((await drawer.textContent()).includes("whsec_") === false, "the secret is gone from the page");
      const [made] = await automationsOf();
      expect(made?.name === "Notify sink" && made.condition[0] === `${f.Name}:contains:Hooked`, "saved as asked: " + JSON.stringify(made));
      expect(made.trigger.event === "row.updated" && made.trigger.fields?.[0] === f.Name, "the trigger field: " + JSON.stringify(made.trigger));
      expect(!JSON.stringify(made).includes("whsec_"), "a read never shows the secret");
      await drawer.getByRole("button", { name: "Close automations" }).click();

      await editCell(page, "Item 0012", "Hooked 0012");
      await page.getByText("All changes saved").waitFor();
      const [hook] = await sink.wait("/hook");
      expect(signatureHolds(secret, hook), "the delivery is signed with the secret the panel showed");
      const body = JSON.parse(hook.body);
      expect(body.type === "row.updated" && body.data.rows[0].cells[f.Name] === "Hooked 0012", "the payload has the row: " + hook.body);

      await page.getByRole("button", { name: "Automations" }).click();
      await drawer.getByRole("button", { name: "Run log of Notify sink" }).click();
      const run = drawer.locator(".runs tbody tr").first();
      await run.locator(".run-status.succeeded").waitFor();
      await run.locator(".delivery-state.delivered").waitFor();
      expect((await run.textContent()).includes(sink.url + "/hook"), "the run shows its delivery: " + (await run.textContent()));
      expect((await drawer.getByRole("button", { name: /Replay/ }).count()) === 0, "a delivered run has nothing to replay");
      await page.screenshot({ path: join(shots, "12-automation-run-log.png") });

      // Back to the list by keyboard; disable, then edit: the webhook keeps its secret, so none is shown.
      await page.keyboard.press("Escape");
      const toggle = drawer.getByRole("switch", { name: "Enabled: Notify sink" });
      expect((await toggle.getAttribute("aria-checked")) === "true", "the switch shows it on");
      await toggle.click();
      await drawer.locator(".auto-state.off").waitFor();
      expect((await automationsOf())[0].enabled === false, "disabled on the server");
      await drawer.getByRole("button", { name: "Edit Notify sink" }).click();
      expect((await drawer.getByLabel("Webhook URL").inputValue()) === sink.url + "/hook", "the form shows the saved URL");
      await drawer.getByRole("textbox", { name: "Name", exact: true }).fill("Notify the sink");
      await drawer.getByRole("checkbox", { name: "Enabled", exact: true }).check();
      await drawer.getByRole("button", { name: "Save changes" }).click();
      await drawer.getByRole("heading", { name: "Notify the sink" }).waitFor();
      expect((await drawer.locator(".secret-notice").count()) === 0, "an edit that keeps the webhook shows no new secret");
      const [edited] = await automationsOf();
      expect(edited.enabled && edited.actions[0].id === made.actions[0].id, "the webhook kept its id (and so its secret): " + JSON.stringify(edited));
      check();
    } finally {
      await sink.close();
    }
  });

  test("automations: a receiver that answers 410 pauses the webhook, the failed run can be replayed, a viewer sees it all but edits nothing", async (page) => {
    const check = watchConsole(page, [401]);
    const sink = await startSink();
    try {
      await signIn(page, app.url, a);
      await openTable(page, app.url, table.id, "Item 0001");
      await page.getByRole("button", { name: "Automations" }).click();
      const drawer = page.locator(".drawer");
      await drawer.getByRole("button", { name: "New automation" }).click();
      await drawer.getByRole("textbox", { name: "Name", exact: true }).fill("Gone receiver");
      await drawer.getByRole("button", { name: "Add condition" }).click();
      await drawer.getByLabel("Condition 1 field").selectOption({ label: "Name" });
      await drawer.getByLabel("Condition 1 operator").selectOption("contains");
      await drawer.getByLabel("Condition 1 value").fill("Gone");
      await drawer.getByLabel("Webhook URL").fill(sink.url + "/gone");
      await drawer.getByRole("button", { name: "Create automation" }).click();
      await drawer.getByRole("button", { name: "I have stored it" }).click();
      await drawer.getByRole("button", { name: "Close automations" }).click();

      await editCell(page, "Item 0013", "Gone 0013");
      await page.getByText("All changes saved").waitFor();
      await sink.wait("/gone");
      // The 410 is recorded once the receiver has answered: wait for it before opening the list.
      for (let i = 0; i < 200 && !(await automationsOf()).find((x) => x.name === "Gone receiver")?.actions[0].disabled; i++)
        await new Promise((r) => setTimeout(r, 50));

      await page.getByRole("button", { name: "Automations" }).click();
      await drawer.getByText(/paused: the receiver answered 410 Gone/).waitFor();
      await drawer.getByRole("button", { name: "Run log of Gone receiver" }).click();
      const run = drawer.locator(".runs tbody tr").first();
      await run.locator(".run-status.failed").waitFor();
      await run.getByText(/410 Gone/).first().waitFor();
      await page.screenshot({ path: join(shots, "13-automation-failed.png") });
      await run.getByRole("button", { name: /Replay/ }).click();
      await drawer.getByText(/Replay queued/).waitFor();
      await sink.wait("/gone", 2);
      await run.locator(".run-status.succeeded").waitFor();
      check();

      // A viewer of the realm: the same automations and runs, no editing.
      const viewer = { email: "vic@finance.example", password: "correct horse battery" };
      await app.cli("user", "create", "--realm", a.realm.id, "--email", viewer.email, "--password", viewer.password, "--role", "viewer");
      await page.context().clearCookies();
      await signIn(page, app.url, viewer);
      await openTable(page, app.url, table.id, "Item 0001");
      await page.getByRole("button", { name: "Automations" }).click();
      await drawer.getByRole("heading", { name: "Gone receiver" }).waitFor();
      await drawer.getByText(/editors change them/).waitFor();
      for (const name of ["New automation", "Edit Gone receiver", "Delete Gone receiver"])
        expect((await drawer.getByRole("button", { name }).count()) === 0, `a viewer has no ${name} button`);
      expect((await drawer.getByRole("switch").count()) === 0, "a viewer has no on/off switch");
      await drawer.getByRole("button", { name: "Run log of Gone receiver" }).click();
      await drawer.locator(".runs .run-status.succeeded").first().waitFor();
      expect((await drawer.getByRole("button", { name: /Replay/ }).count()) === 0, "a viewer cannot replay");
      await page.screenshot({ path: join(shots, "14-automation-viewer.png") });
      check();
    } finally {
      await sink.close();
    }
  });
}
