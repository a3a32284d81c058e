#!/usr/bin/env node
// npm test: the client's tests against a real lockd on a real Redis.
//
// With the harness's variables set (LOCKD_URL and the others of
// clients/doc.go), it compiles the client, its tests and the examples of
// README.md with tsc in strict mode (the TypeScript pinned in tools/js)
// into a temporary directory, and runs them there with `node --test`,
// one file at a time. Without LOCKD_URL it runs the Go test that starts
// Redis and the lockds, TestTypeScript in clients/, which calls this
// script back with them.
//
//   cd clients/typescript && npm test
//   LOCKD_TS_KEEP=1 ...   keeps the temporary directory and prints where it is
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const repo = join(pkg, "..", "..");
// The package's own devDependencies after `npm install` here, else the
// same versions in tools/js (which ./scripts/install-deps installs).
const own = join(pkg, "node_modules");
const tools = existsSync(join(own, ".bin", "tsc")) ? own : join(repo, "tools", "js", "node_modules");

if (!process.env.LOCKD_URL) {
  console.error("LOCKD_URL is not set: running the Go harness, which starts Redis and lockd and runs these tests");
  const go = spawnSync("go", ["test", "-count=1", "-run", "^TestTypeScript$", "-v", "./clients/"], {
    cwd: repo,
    stdio: "inherit",
  });
  if (go.error) {
    console.error(`go: ${go.error.message} (Go is needed to start lockd for the tests)`);
  }
  process.exit(go.status ?? 1);
}

const tsc = join(tools, ".bin", "tsc");
if (!existsSync(tsc) || !existsSync(join(tools, "@types", "node"))) {
  console.error(`${tsc} or @types/node is missing: run ./scripts/install-deps (npm ci in tools/js)`);
  process.exit(1);
}

// The build: a copy of the package named lockd-client, so that the tests
// and the README's examples import it by its name (a package may import
// itself through its "exports"), as its users do.
const out = mkdtempSync(join(tmpdir(), "lockd-ts-test-"));
let status = 1;
try {
  status = buildAndRun();
} finally {
  if (process.env.LOCKD_TS_KEEP) {
    console.error(`kept ${out}`);
  } else {
    rmSync(out, { recursive: true, force: true });
  }
}
process.exit(status);

function buildAndRun() {
  cpSync(join(pkg, "src"), join(out, "src"), { recursive: true });
  cpSync(join(pkg, "test"), join(out, "test"), { recursive: true });
  writeFileSync(
    join(out, "package.json"),
    JSON.stringify({
      name: "lockd-client",
      private: true,
      type: "module",
      exports: { ".": { types: "./src/index.ts", default: "./dist/src/index.js" } },
    }),
  );
  mkdirSync(join(out, "node_modules"));
  symlinkSync(join(tools, "@types"), join(out, "node_modules", "@types"), "dir");

  // Each ```ts block of README.md, as a module that tsc checks; the
  // functions they call are declared in test/readme-globals.d.ts.
  const readme = readFileSync(join(pkg, "README.md"), "utf8");
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
  mkdirSync(join(out, "readme"));
  blocks.forEach((code, i) => {
    writeFileSync(join(out, "readme", `example-${i + 1}.ts`), code.includes("import ") ? code : code + "\nexport {};\n");
  });

  const base = JSON.parse(readFileSync(join(pkg, "tsconfig.json"), "utf8").replace(/^\s*\/\/.*$/gm, ""));
  writeFileSync(
    join(out, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        ...base.compilerOptions,
        types: ["node"],
        declaration: false,
        rootDir: ".",
        outDir: "dist",
      },
      include: ["src", "test", "readme"],
    }),
  );
  const built = spawnSync(tsc, ["-p", out], { cwd: out, stdio: "inherit" });
  if (built.status !== 0) {
    console.error(`tsc: ${built.error ?? `exit status ${built.status}`}`);
    return 1;
  }

  const files = readdirSync(join(out, "dist", "test"))
    .filter((f) => f.endsWith(".test.js"))
    .sort()
    .map((f) => join("dist", "test", f));
  const args = ["--test", "--test-reporter=spec"];
  // One file at a time: the scenarios measure time, and a pause of Redis
  // must not land in another file's test.
  if (process.allowedNodeEnvironmentFlags.has("--test-concurrency")) {
    args.push("--test-concurrency=1");
  }
  const run = spawnSync(process.execPath, [...args, ...files], {
    cwd: out,
    stdio: "inherit",
    env: { ...process.env, LOCKD_TS_PACKAGE_DIR: pkg, LOCKD_TS_BUILD_DIR: out },
  });
  return run.status ?? 1;
}
