// Browser tests of live updates: two people of one realm on the same table,
// each in a browser of their own; a person of another realm, who may not
// watch it; and a grid that outlives its server's restart. The restart
// test restarts the shared server, so these run last.
import { gridCentre, launch, signIn } from "./lib.mjs";

export function liveTests({ test, expect, watchConsole, openTable, editCell, app, realm, other, table, f }) {
  test("live: an edit in one person's grid appears in another's, and another realm may not watch", async (page) => {
    const check = watchConsole(page, [401, 404]);
    const colleague = { email: "cy@finance.example", password: realm.password };
    await app.cli("user", "create", "--realm", realm.realm.id, "--email", colleague.email, "--password", colleague.password, "--role", "editor");

    await signIn(page, app.url, realm);
    await openTable(page, app.url, table.id, "Item 0016");
    await page.locator('[data-live="live"]').waitFor();

    const second = await launch();
    try {
      const theirs = second.context.pages()[0] ?? (await second.context.newPage());
      theirs.setDefaultTimeout(30_000);
      const checkTheirs = watchConsole(theirs, [401]);
      await signIn(theirs, app.url, colleague);
      await openTable(theirs, app.url, table.id, "Item 0016");
      await theirs.locator('[data-live="live"]').waitFor();

      await editCell(page, "Item 0016", "Item 0016 (live)");
      const saved = Date.now(); // the editor has closed: the save is on its way
      await theirs.getByText("Item 0016 (live)", { exact: true }).first().waitFor({ state: "attached", timeout: 5000 });
      const delay = Date.now() - saved;
      console.log(`     live: the edit appeared in the other person's grid ${delay} ms after the editor closed`);
      expect(delay < 1000, `the edit took ${delay} ms to appear in the other grid, not under a second`);

      // And through the API: a new row appears at the end of the other
      // person's grid, scrolled there, and goes again when it is deleted.
      const status = theirs.locator(".statusbar span").first();
      const grid = await gridCentre(theirs);
      const wheel = async () => {
        await theirs.mouse.move(grid.x, grid.y);
        await theirs.mouse.wheel(0, 4000);
        await theirs.waitForTimeout(30);
      };
      for (let i = 0; i < 400 && (await status.textContent()).includes("more below"); i++) await wheel();
      const before = await status.textContent();
      expect(!before.includes("more below"), `the other grid reached the end of the table: ${before}`);
      const count = (text) => Number(text.match(/^([\d,.\s\u202f]+) rows?/)[1].replace(/\D/g, ""));
      const made = await realm.api.post(`/api/v1/tables/${table.id}/rows`, { rows: [{ cells: { [f.Name]: "Made while watched" } }] });
      expect(made.rows.length === 1, "a row was made");
      const appeared = theirs.getByText("Made while watched", { exact: true });
      for (let i = 0; i < 100 && (await appeared.count()) === 0; i++) await wheel();
      await appeared.first().waitFor({ state: "attached", timeout: 5000 });
      expect(count(await status.textContent()) === count(before) + 1, `the other grid counts the new row: ${await status.textContent()} after ${before}`);
      await realm.api.del(`/api/v1/tables/${table.id}/rows`, { ids: [made.rows[0].id] });
      await appeared.first().waitFor({ state: "detached", timeout: 5000 });
      expect(count(await status.textContent()) === count(before), `the other grid counts the row gone: ${await status.textContent()} after ${before}`);
      await theirs.locator('[data-live="live"]').waitFor();
      checkTheirs();
    } finally {
      await second.close();
    }

    // A person of another realm: the table is not found, so there is nothing to watch.
    const stranger = await launch();
    try {
      const p = stranger.context.pages()[0] ?? (await stranger.context.newPage());
      await signIn(p, app.url, other);
      const status = await p.evaluate(async (id) => (await fetch(`/api/v1/tables/${id}/events`)).status, table.id);
      expect(status === 404, `another realm's person watching the table got ${status}, not 404`);
    } finally {
      await stranger.close();
    }
    check();
  });

  test("live: a watching grid survives the server restarting, and shows what changed while it was down", async (page) => {
    // While the server is down the stream's reconnects fail, and while it
    // shuts down it answers 503: the browser logs both.
    const check = watchConsole(page, [401, 404, 503], [/ERR_CONNECTION_REFUSED/, /ERR_EMPTY_RESPONSE/, /ERR_CONNECTION_RESET/, /ERR_INCOMPLETE_CHUNKED_ENCODING/]);
    await signIn(page, app.url, realm);
    await openTable(page, app.url, table.id, "Item 0017");
    await page.locator('[data-live="live"]').waitFor();

    const started = Date.now();
    await app.restart(async () => {
      await page.locator('[data-live="reconnecting"]').waitFor({ timeout: 10_000 });
      // A change no event tells of: made in the database while no server
      // runs. Only the resync after reconnecting can show it.
      await app.sql(
        `UPDATE rows SET cells = jsonb_set(cells, '{${f.Name}}', '"Item 0017 (while down)"'), version = version + 1, updated_at = now() ` +
          `WHERE table_id = '${table.id}' AND cells->>'${f.Name}' = 'Item 0017'`,
      );
    });
    await page.getByText("Item 0017 (while down)", { exact: true }).first().waitFor({ state: "attached", timeout: 15_000 });
    await page.locator('[data-live="live"]').waitFor();
    console.log(`     live: the grid was live again and showed the change made while the server was down ${Date.now() - started} ms after the restart began`);

    // And it is live, not just reloaded: an edit through the API appears.
    const found = await realm.api.get(`/api/v1/tables/${table.id}/rows?filter=${f.Name}:eq:${encodeURIComponent("Item 0018")}`);
    expect(found.rows.length === 1, `one row named Item 0018, not ${found.rows.length}`);
    const row = found.rows[0];
    await realm.api.patch(`/api/v1/tables/${table.id}/rows`, { rows: [{ id: row.id, version: row.version, cells: { [f.Name]: "Item 0018 (after the restart)" } }] });
    await page.getByText("Item 0018 (after the restart)", { exact: true }).first().waitFor({ state: "attached", timeout: 5000 });
    check();
  });
}
