// The grid's speed on a 100,000-row table, measured in Debian's Chromium:
//   APPDOR_TEST_DATABASE_URL=… APPDOR_TEST_REDIS_URL=… npm run measure:web
// Prints: navigation → first rows drawn (cold cache, then warm), the JS heap
// after scrolling from the top to the bottom, and the gzip size of web/dist.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { gzipSync } from "node:zlib";
import { launch, root, seedRealm, seedTable, signIn, startAppdor } from "./lib.mjs";

const ROWS = Number(process.env.APPDOR_MEASURE_ROWS ?? 100_000);
const RUNS = 5;

function gzipSizes() {
  const dist = join(root, "web", "dist");
  const out = [];
  const walk = (d) => {
    for (const n of readdirSync(d)) {
      const p = join(d, n);
      if (statSync(p).isDirectory()) walk(p);
      else {
        const b = readFileSync(p);
        out.push({ file: relative(dist, p), bytes: b.length, gzip: gzipSync(b, { level: 9 }).length });
      }
    }
  };
  walk(dist);
  return out;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const app = await startAppdor();
try {
  const a = await seedRealm(app, "Measure", "measure@example.com");
  const seedStart = Date.now();
  const { table } = await seedTable(a.api, ROWS);
  const first = "Item " + "1".padStart(Math.max(4, String(ROWS).length), "0");
  const last = "Item " + String(ROWS);
  console.log(`seeded ${ROWS} rows in ${((Date.now() - seedStart) / 1000).toFixed(1)} s`);

  const { context, close } = await launch();
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(120_000);
    const cdp = await context.newCDPSession(page);
    await cdp.send("Performance.enable");
    await signIn(page, app.url, a);

    const firstRows = [];
    for (let run = 0; run < RUNS; run++) {
      if (run === 0) await cdp.send("Network.clearBrowserCache");
      const t0 = Date.now();
      await page.goto(`${app.url}/t/${table.id}`);
      await page.getByText(first, { exact: true }).waitFor({ state: "attached" });
      const wall = Date.now() - t0;
      const mark = await page.evaluate(() => {
        const m = performance.getEntriesByName("appdor:first-rows")[0];
        return m ? Math.round(m.startTime) : null;
      });
      firstRows.push({ run, cache: run === 0 ? "cold" : "warm", mark_ms: mark, wall_ms: wall });
    }

    // Scroll from the top to the bottom, as a person dragging down would.
    const heap = async () => (await cdp.send("Performance.getMetrics")).metrics.find((m) => m.name === "JSHeapUsedSize").value;
    let peak = await heap();
    const scrollStart = Date.now();
    for (let i = 0; ; i++) {
      const done = await page.evaluate(() => {
        const s = document.querySelector(".dvn-scroller");
        s.scrollTop = s.scrollHeight;
        return !document.querySelector(".statusbar")?.textContent?.includes("more below");
      });
      if (done && (await page.getByText(last, { exact: true }).count()) > 0) break;
      if (i % 10 === 0) peak = Math.max(peak, await heap());
      await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r())));
      if (Date.now() - scrollStart > 15 * 60_000) throw new Error("scrolling to the end took over 15 minutes");
    }
    const scrollMs = Date.now() - scrollStart;
    peak = Math.max(peak, await heap());
    const beforeGC = await heap();
    await cdp.send("HeapProfiler.collectGarbage");
    const afterGC = (await cdp.send("Runtime.getHeapUsage")).usedSize;
    const held = await page.locator(".statusbar").textContent();
    await page.screenshot({ path: join(root, "test", "e2e", "screenshots", "10-100k-bottom.png") });

    const sizes = gzipSizes();
    const mb = (b) => (b / 1024 / 1024).toFixed(1) + " MB";
    const report = {
      rows: ROWS,
      first_rows_drawn: firstRows,
      first_rows_warm_median_ms: median(firstRows.filter((r) => r.cache === "warm").map((r) => r.mark_ms)),
      scroll_top_to_bottom_s: +(scrollMs / 1000).toFixed(1),
      js_heap_after_scroll: mb(beforeGC),
      js_heap_after_scroll_and_gc: mb(afterGC),
      js_heap_peak_during_scroll: mb(peak),
      status_bar_at_end: held,
      assets: sizes,
      assets_gzip_total_kb: +(sizes.reduce((n, s) => n + s.gzip, 0) / 1024).toFixed(1),
      first_load_gzip_kb: +(sizes.filter((s) => /^(index\.html|assets\/index-)/.test(s.file)).reduce((n, s) => n + s.gzip, 0) / 1024).toFixed(1),
    };
    console.log(JSON.stringify(report, null, 2));
  } finally {
    await close();
  }
} finally {
  await app.stop();
}
