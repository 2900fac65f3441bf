/// <reference types="vitest/config" />
import { defineConfig } from "vite";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL(".", import.meta.url));

// Vite 8 compiles TSX with its built-in transformer; no plugin is needed.
// The build must be byte-reproducible: `npm run check:dist` rebuilds and
// compares with the committed web/dist.
export default defineConfig({
  root,
  base: "/",
  oxc: { jsx: { runtime: "automatic" } },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    assetsDir: "assets",
    sourcemap: false,
    target: "es2022",
    chunkSizeWarningLimit: 700,
  },
  server: {
    proxy: { "/api": process.env.APPDOR_DEV_API ?? "http://127.0.0.1:8080" },
  },
  test: {
    root,
    include: ["src/**/*.test.ts"],
    environment: "node",
  },
});
