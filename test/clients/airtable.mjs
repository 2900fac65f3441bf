// Airtable's own client (the `airtable` package from the npm registry),
// unchanged, against the real Appdor binary on its own database: only its
// endpointUrl and token differ from a script written for Airtable.
//   APPDOR_TEST_DATABASE_URL=… APPDOR_TEST_REDIS_URL=… npm run test:clients
import Airtable from "airtable";
import { seedRealm, startAppdor } from "../e2e/lib.mjs";

function expect(cond, msg) {
  if (!cond) throw new Error(msg);
}
const sorted = (v) => (v && typeof v === "object" && !Array.isArray(v) ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted(v[k])])) : v);
const same = (a, b) => JSON.stringify(sorted(a)) === JSON.stringify(sorted(b));

const app = await startAppdor();
let failed = 0;
const tests = [];
const test = (name, fn) => tests.push({ name, fn });

try {
  const owner = await seedRealm(app, "Sales", "sam@sales.example");
  const crm = await owner.api.post("/api/v1/apps", { name: "CRM" });
  await owner.api.post(`/api/v1/apps/${crm.id}/tables`, {
    name: "Leads",
    fields: [
      { name: "Name", type: "text" },
      { name: "Stage", type: "single_select", options: { choices: ["New", "Won", "Lost"] } },
      { name: "Value", type: "number", options: { precision: 2 } },
      { name: "Hot", type: "checkbox" },
      { name: "Next call", type: "date" },
    ],
  });
  const tok = await app.cli("token", "create", "--realm", owner.realm.id, "--user", owner.email, "--name", "airtable.js");

  // The one line that differs from a script written for Airtable.
  Airtable.configure({ endpointUrl: app.url, apiKey: tok.token });
  const base = Airtable.base(crm.id);
  const leads = base("Leads");

  const made = [];
  test("create: ten records in one call, then one", async () => {
    const batch = [];
    for (let i = 0; i < 10; i++) {
      batch.push({ fields: { Name: `Lead ${String(i).padStart(2, "0")}`, Stage: i % 3 === 0 ? "Won" : "New", Value: i * 100.5, Hot: i % 2 === 0, "Next call": `2025-0${1 + (i % 9)}-15` } });
    }
    const records = await leads.create(batch);
    expect(records.length === 10, `created ${records.length}`);
    made.push(...records);
    const one = await leads.create({ Name: "Lead 10", Stage: "Lost", Value: 5 });
    expect(one.get("Name") === "Lead 10" && one.get("Stage") === "Lost", JSON.stringify(one.fields));
    expect(one.get("Hot") === undefined, "an unchecked box is left out");
    made.push(one);
    // typecast, as a script importing strings would send it
    const cast = await leads.create([{ fields: { Name: "Cast", Value: "12.5", Hot: "true" } }], { typecast: true });
    expect(cast[0].get("Value") === 12.5 && cast[0].get("Hot") === true, JSON.stringify(cast[0].fields));
    made.push(cast[0]);
  });

  test("select().eachPage walks every page with pageSize", async () => {
    const names = [];
    let pages = 0;
    await leads.select({ pageSize: 4 }).eachPage((records, next) => {
      pages++;
      names.push(...records.map((r) => r.get("Name")));
      next();
    });
    expect(pages === 3, `pages: ${pages}`);
    expect(names.length === 12 && names[0] === "Lead 00" && names[11] === "Cast", names.join());
  });

  test("select() with filterByFormula, sort, fields and maxRecords", async () => {
    const won = await leads
      .select({ filterByFormula: "AND({Stage} = 'Won', {Value} > 100)", sort: [{ field: "Value", direction: "desc" }], fields: ["Name", "Value"] })
      .all();
    expect(same(won.map((r) => r.get("Name")), ["Lead 09", "Lead 06", "Lead 03"]), won.map((r) => r.get("Name")).join());
    expect(won.every((r) => r.get("Stage") === undefined), "fields: keeps just Name and Value");
    const top = await leads.select({ sort: [{ field: "Name", direction: "desc" }], maxRecords: 2 }).firstPage();
    expect(same(top.map((r) => r.get("Name")), ["Lead 10", "Lead 09"]), top.map((r) => r.get("Name")).join());
    const soon = await leads.select({ filterByFormula: "IS_BEFORE({Next call}, '2025-03-01')", method: "post" }).all();
    expect(same(soon.map((r) => r.get("Name")), ["Lead 00", "Lead 01", "Lead 09"]), `before March (POST listRecords): ${soon.map((r) => r.get("Name")).join()}`);
  });

  test("find, update, replace, destroy", async () => {
    const id = made[1].id;
    const found = await leads.find(id);
    expect(found.get("Name") === "Lead 01", JSON.stringify(found.fields));
    const [updated] = await leads.update([{ id, fields: { Stage: "Won" } }]);
    expect(updated.get("Stage") === "Won" && updated.get("Name") === "Lead 01", "update merges");
    const single = await leads.update(id, { Value: 42 });
    expect(single.get("Value") === 42 && single.get("Stage") === "Won", "update of one record merges");
    const replaced = await leads.replace(id, { Name: "Lead 01 (replaced)" });
    expect(same(replaced.fields, { Name: "Lead 01 (replaced)" }), "replace clears the rest: " + JSON.stringify(replaced.fields));
    const [bulk] = await leads.replace([{ id, fields: { Name: "Lead 01", Hot: true } }]);
    expect(same(bulk.fields, { Name: "Lead 01", Hot: true }), JSON.stringify(bulk.fields));
    const record = await leads.find(made[2].id);
    await record.patchUpdate({ Value: 1 });
    expect(record.get("Value") === 1, "record.patchUpdate");
    const gone = await leads.destroy([made[3].id, made[4].id]);
    expect(gone.length === 2, "destroy two");
    await leads.destroy(made[5].id);
    try {
      await leads.find(made[5].id);
      throw new Error("a destroyed record was found");
    } catch (e) {
      expect(e.statusCode === 404 && e.error === "NOT_FOUND", `find after destroy: ${e.statusCode} ${e.error}`);
    }
  });

  test("errors come back as AirtableError with Airtable's types", async () => {
    try {
      await leads.create({ Nope: 1 });
      throw new Error("an unknown field was accepted");
    } catch (e) {
      expect(e.statusCode === 422 && e.error === "UNKNOWN_FIELD_NAME", `${e.statusCode} ${e.error} ${e.message}`);
    }
    try {
      await leads.select({ filterByFormula: "REGEX_MATCH({Name}, 'x')" }).firstPage();
      throw new Error("an unsupported function was accepted");
    } catch (e) {
      expect(e.statusCode === 422 && e.error === "INVALID_FILTER_BY_FORMULA" && /REGEX_MATCH/.test(e.message), `${e.statusCode} ${e.error} ${e.message}`);
    }
    const other = new Airtable({ endpointUrl: app.url, apiKey: "apd_not-a-real-token" }).base(crm.id)("Leads");
    try {
      await other.select().firstPage();
      throw new Error("a bad token was accepted");
    } catch (e) {
      expect(e.statusCode === 401 && e.error === "AUTHENTICATION_REQUIRED", `${e.statusCode} ${e.error}`);
    }
  });

  test("a 60/minute token: the client backs off on 429 + Retry-After and finishes", async () => {
    const slow = await app.cli("token", "create", "--realm", owner.realm.id, "--user", owner.email, "--name", "slow", "--requests-per-minute", "60");
    const raw = await fetch(`${app.url}/v0/${crm.id}/Leads?pageSize=1`, { headers: { Authorization: "Bearer " + slow.token } });
    expect(raw.ok, `first call ${raw.status}`);
    let refused = null;
    for (let i = 0; i < 150 && !refused; i++) {
      const r = await fetch(`${app.url}/v0/${crm.id}/Leads?pageSize=1`, { headers: { Authorization: "Bearer " + slow.token } });
      if (r.status === 429) refused = { retryAfter: r.headers.get("Retry-After"), body: await r.json() };
    }
    expect(refused, "150 calls in a row were all answered");
    expect(refused.body.error.type === "RATE_LIMIT_REACHED" && Number(refused.retryAfter) >= 1, JSON.stringify(refused));
    // Airtable's client, on the same token, retries by itself until answered.
    const t0 = Date.now();
    const page = await new Airtable({ endpointUrl: app.url, apiKey: slow.token }).base(crm.id)("Leads").select({ pageSize: 1 }).firstPage();
    expect(page.length === 1, "answered after backing off");
    console.log(`    (the refused client was answered after ${Date.now() - t0} ms)`);
  });

  for (const t of tests) {
    try {
      await t.fn();
      console.log(`ok   ${t.name}`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${t.name}\n     ${e.stack || e}`);
    }
  }
  console.log(`${tests.length - failed} passed, ${failed} failed`);
} finally {
  await app.stop();
}
process.exit(failed ? 1 : 0);
