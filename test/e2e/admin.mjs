// Browser tests of administration: a new self-hoster's first run on an
// empty database, from the setup link to a shared grid with a colleague and
// a script token, with no terminal; then the gauges, and an operator's view.
// They run on an Appdor of their own, since the first run needs nobody there.
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { launch, seedRealm, seedTable, signIn, startAppdor } from "./lib.mjs";

const run = promisify(execFile);

export function adminTests({ test, expect, watchConsole, shots }) {
  test("administration: from an empty database to a shared grid, a colleague and a script token, in the browser", async (page) => {
    const app = await startAppdor(["--log-level", "info"]);
    try {
      const check = watchConsole(page, [401, 403, 404, 429]);
      const logged = app.log.join("");
      const link = /"setup_url":"([^"]+)"/.exec(logged)?.[1];
      expect(link, "the first run logs a setup link:\n" + logged);
      expect(link.startsWith(app.url + "/setup?token=setup_"), `the link is this server's: ${link}`);
      expect((await fetch(app.url + "/setup")).status === 404, "without the secret, /setup is 404");

      // The setup page makes the first realm and its owner, and signs them in.
      await page.goto(link);
      await page.getByRole("heading", { name: "Set up Appdor" }).waitFor();
      await page.getByLabel("Realm name").fill("Operations");
      await page.getByLabel("Your email").fill("olga@ops.example");
      await page.getByLabel("Password").fill("correct horse battery");
      await page.screenshot({ path: join(shots, "10-setup.png") });
      await page.getByRole("button", { name: "Create realm and owner" }).click();
      await page.getByRole("heading", { name: "Apps" }).waitFor();
      expect((await fetch(link)).status === 404, "the link is spent");

      // A grid to share.
      await page.getByLabel("New app name").fill("Team");
      await page.getByRole("button", { name: "Create app" }).click();
      await page.getByLabel("New table name").fill("Tasks");
      await page.getByRole("button", { name: "Add table" }).click();
      await page.getByRole("link", { name: "Tasks" }).click();
      await page.getByTestId("data-grid-canvas").waitFor();
      const tableId = /\/t\/([^/?]+)/.exec(page.url())[1];

      // Members: a colleague with an initial password, a viewer by invite.
      await page.getByRole("link", { name: "Settings" }).click();
      await page.getByRole("heading", { name: "Members" }).waitFor();
      const addPerson = async (email, role, password) => {
        await page.getByLabel("Email").fill(email);
        await page.getByLabel("Role", { exact: true }).selectOption(role);
        if (password) {
          await page.getByLabel("Set an initial password").check();
          await page.getByLabel("Initial password", { exact: true }).fill(password);
        }
        await page.getByRole("button", { name: "Add person" }).click();
        await page.getByRole("status").getByText(email).waitFor();
      };
      await addPerson("carl@ops.example", "editor", "carl's password");
      await page.getByRole("button", { name: "Done" }).click();
      await addPerson("vera@ops.example", "viewer");
      const invite = await page.getByLabel("Invite link").inputValue();
      expect(invite.startsWith(app.url + "/invite?token=inv_"), `an invite link: ${invite}`);
      await page.getByRole("cell", { name: "vera@ops.example invited" }).waitFor();
      await page.screenshot({ path: join(shots, "11-members.png") });
      await page.getByRole("button", { name: "Done" }).click();

      // The colleague signs in and sees the shared grid.
      const carl = await launch();
      try {
        const theirs = carl.context.pages()[0] ?? (await carl.context.newPage());
        theirs.setDefaultTimeout(30_000);
        await signIn(theirs, app.url, { email: "carl@ops.example", password: "carl's password" });
        await theirs.getByRole("link", { name: "Tasks" }).click();
        await theirs.getByTestId("data-grid-canvas").waitFor();
        expect((await theirs.getByRole("link", { name: "Settings" }).count()) === 0, "an editor has no settings link");
      } finally {
        await carl.close();
      }

      // The owner makes carl a viewer: chosen, then saved.
      await page.getByLabel("Role of carl@ops.example").selectOption("viewer");
      await page.getByRole("button", { name: "Save" }).click();
      await page.getByRole("button", { name: "Save" }).waitFor({ state: "detached" });
      expect((await page.getByLabel("Role of carl@ops.example").inputValue()) === "viewer", "the role is saved");

      // The invited viewer sets a password, and may not see members or tokens.
      const vera = await launch();
      try {
        const theirs = vera.context.pages()[0] ?? (await vera.context.newPage());
        theirs.setDefaultTimeout(30_000);
        const checkTheirs = watchConsole(theirs, [401, 403]);
        await theirs.goto(invite);
        await theirs.getByLabel("Password").fill("vera's own password");
        await theirs.getByRole("button", { name: "Set password and sign in" }).click();
        await theirs.getByRole("heading", { name: "Apps" }).waitFor();
        await theirs.goto(app.url + "/settings/members");
        await theirs.getByText("Only the realm's owners manage its members, tokens and audit log.").waitFor();
        expect((await theirs.getByRole("heading", { name: "Members" }).count()) === 0, "no members page for a viewer");
        for (const path of ["/api/v1/members", "/api/v1/tokens"]) {
          const status = await theirs.evaluate((p) => fetch(p).then((r) => r.status), path);
          expect(status === 403, `a viewer's ${path} is ${status}, not 403`);
        }
        checkTheirs();
      } finally {
        await vera.close();
      }

      // A script token, made in the browser, used with curl, then a burst
      // over its ceiling: the refusals show in its row and in the gauges.
      await page.getByRole("link", { name: "Tokens" }).click();
      await page.getByLabel("Token name").fill("nightly sync");
      await page.getByLabel("Requests per minute").fill("30");
      await page.getByRole("button", { name: "Create token" }).click();
      const secret = await page.getByLabel("Token secret").inputValue();
      expect(secret.startsWith("apd_"), "the secret is shown once");
      await page.screenshot({ path: join(shots, "12-token-created.png") });
      await page.getByRole("button", { name: "Done" }).click();
      const { stdout } = await run("curl", ["-sS", "-H", `Authorization: Bearer ${secret}`, `${app.url}/api/v1/tables/${tableId}/rows`]);
      expect(Array.isArray(JSON.parse(stdout).rows), `curl with the token reads the grid: ${stdout}`);
      let refused = 0;
      for (let i = 0; i < 60; i++) {
        const r = await fetch(`${app.url}/api/v1/tables/${tableId}/rows`, { headers: { Authorization: `Bearer ${secret}` } });
        if (r.status === 429) refused++;
        await r.arrayBuffer();
      }
      expect(refused > 0, "a burst of 60 over a ceiling of 30 a minute is refused in part");
      const row = page.locator('tr[data-token="nightly sync"] [data-refused]');
      const deadline = Date.now() + 30_000;
      for (;;) {
        await page.getByRole("link", { name: "Usage" }).click();
        await page.getByRole("link", { name: "Tokens" }).click();
        const n = Number(await row.textContent());
        if (n >= refused) break;
        expect(Date.now() < deadline, `the token's row shows ${n} refusals, not ${refused}`);
        await page.waitForTimeout(1000);
      }
      await page.screenshot({ path: join(shots, "13-tokens.png") });
      await page.getByRole("link", { name: "Usage" }).click();
      const total = Number(await page.locator(".totals [data-refused]").textContent());
      expect(total >= refused, `the usage gauges show ${total} refusals, not ${refused}`);
      await page.locator(".chart canvas").first().waitFor();
      await page.screenshot({ path: join(shots, "14-usage.png") });
      await page.getByRole("link", { name: "Audit log" }).click();
      await page.locator('tr[data-action="rate_limited"]').first().waitFor();
      await page.locator('tr[data-action="member_added"]').first().waitFor();

      // Another realm: the operator sees both realms' usage side by side,
      // and still cannot open the other realm's table.
      const legal = await seedRealm(app, "Legal", "lea@legal.example");
      const { table: other } = await seedTable(legal.api, 5, { tableName: "Contracts" });
      for (let i = 0; i < 5; i++) await legal.api.get(`/api/v1/tables/${other.id}/rows`);
      await page.getByRole("link", { name: "All realms" }).click();
      const deadline2 = Date.now() + 30_000;
      while ((await page.locator('[data-realm="Legal"] .totals').count()) === 0) {
        expect(Date.now() < deadline2, "the Legal realm's usage reaches the operator's page");
        await page.waitForTimeout(1000);
        await page.getByRole("link", { name: "Audit log" }).click();
        await page.getByRole("link", { name: "All realms" }).click();
      }
      await page.locator('[data-realm="Operations"] .totals').waitFor();
      await page.screenshot({ path: join(shots, "15-operator.png") });
      await page.goto(`${app.url}/t/${other.id}`);
      await page.getByRole("heading", { name: "Not found" }).waitFor();
      const status = await page.evaluate((id) => fetch(`/api/v1/tables/${id}/rows`).then((r) => r.status), other.id);
      expect(status === 404, `the operator reading another realm's rows gets ${status}, not 404`);
      check();
    } finally {
      await app.stop();
    }
  });
}
