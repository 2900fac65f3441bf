// Browser tests of live updates: two people of one realm on the same table,
// each in a browser of their own; and a person of another realm, who may
// not watch it.
import { launch, signIn } from "./lib.mjs";

export function liveTests({ test, expect, watchConsole, openTable, editCell, app, realm, other, table }) {
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

      // And the other way, through the API: a new row and a deleted one.
      const made = await realm.api.post(`/api/v1/tables/${table.id}/rows`, { rows: [{ cells: {} }] });
      expect(made.rows.length === 1, "a row was made");
      await realm.api.del(`/api/v1/tables/${table.id}/rows`, { ids: [made.rows[0].id] });
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
}
