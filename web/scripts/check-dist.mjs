// Rebuilds the UI into a scratch folder and fails when the result differs
// from the committed web/dist, so a change to web/src without a rebuild (or a
// hand-edited dist) cannot land. The build is byte-reproducible: content
// hashes name the assets and nothing in the output depends on time or path.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));
const committed = join(root, "web", "dist");
const scratch = mkdtempSync(join(tmpdir(), "appdor-dist-"));

function files(dir) {
  const out = new Map();
  const walk = (d) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else out.set(relative(dir, p), readFileSync(p));
    }
  };
  walk(dir);
  return out;
}

try {
  execFileSync("npx", ["vite", "build", "--config", "web/vite.config.ts", "--outDir", scratch, "--emptyOutDir", "--logLevel", "warn"], {
    cwd: root,
    stdio: "inherit",
  });
  const want = files(scratch);
  const have = files(committed);
  const problems = [];
  for (const [name, body] of want) {
    if (!have.has(name)) problems.push(`missing from web/dist: ${name}`);
    else if (!have.get(name).equals(body)) problems.push(`differs: web/dist/${name}`);
  }
  for (const name of have.keys()) if (!want.has(name)) problems.push(`stale in web/dist: ${name}`);
  if (problems.length) {
    console.error(problems.join("\n"));
    console.error("web/dist does not match web/src: run `npm run build:web` and commit web/dist.");
    process.exit(1);
  }
  console.log(`web/dist matches the sources (${want.size} files).`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
