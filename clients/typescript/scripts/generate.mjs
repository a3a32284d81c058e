#!/usr/bin/env node
// Regenerates src/api.ts, the request and response types of lockd's API,
// from api/openapi.yaml with the openapi-typescript pinned in tools/js
// (package-lock.json). `go generate ./clients/` runs it, and `make check`
// fails when the committed file differs from what it makes.
//
//   node clients/typescript/scripts/generate.mjs
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const repo = join(pkg, "..", "..");
const gen = join(repo, "tools", "js", "node_modules", ".bin", "openapi-typescript");
if (!existsSync(gen)) {
  console.error(
    `${relative(process.cwd(), gen)} is missing: run ./scripts/install-deps (npm ci in tools/js), which make test and CI run`,
  );
  process.exit(1);
}
// Paths relative to the package, so that the file's header names no
// machine's directories.
const run = spawnSync(gen, [join("..", "..", "api", "openapi.yaml"), "-o", join("src", "api.ts")], {
  cwd: pkg,
  encoding: "utf8",
});
if (run.status !== 0) {
  // Its lint warnings (see tools/js/redocly.yaml) are printed only when it fails.
  process.stderr.write(run.stdout + run.stderr);
  console.error(`openapi-typescript: ${run.error ?? `exit status ${run.status}`}`);
  process.exit(1);
}
