// What the tests share: the servers the Go harness started, scenarios.json,
// a logger that keeps what it is told, and waiting with a bound.
//
// The tests run against a real lockd on a real Redis, started by the Go
// test in clients/ (go test -run TestTypeScript ./clients/), which passes
// their addresses in the environment (see clients/doc.go); `npm test`
// without them runs that Go test. scripts/test.mjs compiles them into a
// temporary directory and says where the package is (LOCKD_TS_PACKAGE_DIR).

import { appendFileSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { createServer } from "node:net";
import { test, type TestContext } from "node:test";
import { Client, type ClientOptions, type Logger } from "lockd-client";

/** env is a variable the Go harness sets; a clear failure without it. */
export function env(name: string): string {
  const value = process.env[name];
  if (!value) {
    throw new Error(
      `${name} is not set: run these tests with \`npm test\` in clients/typescript, or ` +
        "`go test -count=1 -run TestTypeScript ./clients/` (it starts Redis and lockd), or set it by hand",
    );
  }
  return value;
}

/** The package's directory (clients/typescript) and the repository's. */
export const PACKAGE_DIR = env("LOCKD_TS_PACKAGE_DIR");
export const REPO_DIR = join(PACKAGE_DIR, "..", "..");

/** url is the in-process lockd, checked against the OpenAPI contract; 503 during a Redis pause. */
export function url(): string {
  return env("LOCKD_URL");
}

/** slowUrl is the in-process lockd behind a proxy that passes each request on 25 ms late, as a network would. */
export function slowUrl(): string {
  return env("LOCKD_SLOW_URL");
}

/** shortWaitUrl is an in-process lockd whose longest wait (--max-wait) is 1 s. */
export function shortWaitUrl(): string {
  return env("LOCKD_SHORT_WAIT_URL");
}

/** url2 is the second lockd process (lockd serve) on the same Redis. */
export function url2(): string {
  return env("LOCKD_URL_2");
}

export function client(server?: string, opts: Omit<ClientOptions, "baseUrl"> = {}): Client {
  return new Client({ baseUrl: server ?? url(), ...opts });
}

/** unique is a key no other test uses, so that tests never see each other's leases. */
export function unique(name: string): string {
  return `ts:${name}:${randomBytes(5).toString("hex")}`;
}

/** refusingUrl is the URL of a port where nobody listens (connections are refused). */
export async function refusingUrl(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

/** pauseRedis stops redis-server (SIGSTOP) and resolves once it is stopped; it continues ms later. */
export async function pauseRedis(ms: number): Promise<void> {
  const resp = await fetch(`${env("LOCKD_CONTROL_URL")}/redis/pause?ms=${ms}`, { method: "POST" });
  const body = await resp.text();
  if (resp.status !== 204) {
    throw new Error(`pause redis: ${resp.status} ${body}`);
  }
}

/** eventually polls check until it is true, or fails after withinMs. */
export async function eventually(check: () => boolean | Promise<boolean>, what: string, withinMs = 5000): Promise<void> {
  const deadline = performance.now() + withinMs;
  while (!(await check())) {
    if (performance.now() > deadline) {
      throw new Error(`${what}: not true within ${withinMs} ms`);
    }
    await delay(10);
  }
}

/** delay resolves after ms, keeping the process alive meanwhile (leases' timers do not). */
export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** within is p, or a failure after ms: a test never waits unbounded on a signal. */
export async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** aborted resolves when signal aborts (at once if it has), with the time it did. */
export function aborted(signal: AbortSignal): Promise<number> {
  return new Promise((resolve) => {
    if (signal.aborted) {
      resolve(performance.now());
      return;
    }
    signal.addEventListener("abort", () => resolve(performance.now()), { once: true });
  });
}

/** Lines is a Logger that keeps every message, with its level and fields. */
export class Lines implements Logger {
  readonly lines: { level: string; message: string; fields: Record<string, unknown> | undefined }[] = [];
  debug(message: string, fields?: Record<string, unknown>): void {
    this.lines.push({ level: "debug", message, fields });
  }
  info(message: string, fields?: Record<string, unknown>): void {
    this.lines.push({ level: "info", message, fields });
  }
  warn(message: string, fields?: Record<string, unknown>): void {
    this.lines.push({ level: "warn", message, fields });
  }
  error(message: string, fields?: Record<string, unknown>): void {
    this.lines.push({ level: "error", message, fields });
  }
  at(level: string): { message: string; fields: Record<string, unknown> | undefined }[] {
    return this.lines.filter((l) => l.level === level);
  }
  /** text is everything logged, fields included, as one string. */
  text(): string {
    return this.lines.map((l) => `${l.level} ${l.message} ${JSON.stringify(l.fields ?? {})}`).join("\n");
  }
}

/**
 * losingFetch forwards requests to lockd with the platform's fetch, and
 * loses the answers of the first `lose` of them: the request reaches
 * lockd and is carried out, the client sees the connection fail, as when
 * a network drops a reply. `seen` has every request's headers.
 */
export function losingFetch(lose: number): {
  fetch: (input: string, init: RequestInit) => Promise<Response>;
  seen: Headers[];
} {
  const seen: Headers[] = [];
  let left = lose;
  return {
    seen,
    fetch: async (input, init) => {
      seen.push(new Headers(init.headers));
      const resp = await fetch(input, init);
      await resp.clone().arrayBuffer();
      if (left > 0) {
        left--;
        throw new TypeError("fetch failed", { cause: Object.assign(new Error("socket hang up"), { code: "ECONNRESET" }) });
      }
      return resp;
    },
  };
}

/**
 * cuttingFetch forwards requests to lockd with the platform's fetch until
 * cut() is called, which cuts the client off as a network partition does:
 * from then on every request fails as a refused connection and nothing
 * reaches lockd, and a request already sent gets no answer.
 */
export function cuttingFetch(): {
  fetch: (input: string, init: RequestInit) => Promise<Response>;
  cut: () => void;
} {
  let cut = false;
  const pending = new Set<(err: unknown) => void>();
  const refused = () =>
    new TypeError("fetch failed", { cause: Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }) });
  return {
    cut: () => {
      cut = true;
      for (const reject of pending) reject(refused());
      pending.clear();
    },
    fetch: (input, init) => {
      if (cut) {
        return Promise.reject(refused());
      }
      return new Promise<Response>((resolve, reject) => {
        pending.add(reject);
        fetch(input, init).then(
          (resp) => {
            pending.delete(reject);
            if (cut) reject(refused());
            else resolve(resp);
          },
          (err: unknown) => {
            pending.delete(reject);
            reject(err);
          },
        );
      });
    },
  };
}

/** recordingFetch forwards requests to lockd and records each one's method and path (`seen`). */
export function recordingFetch(): {
  fetch: (input: string, init: RequestInit) => Promise<Response>;
  seen: string[];
} {
  const seen: string[] = [];
  return {
    seen,
    fetch: (input, init) => {
      seen.push(`${init.method ?? "GET"} ${new URL(input).pathname}`);
      return fetch(input, init);
    },
  };
}

// Scenarios: clients/scenarios.json, shared with every client.

export interface Scenario {
  id: string;
  title: string;
  pending?: string;
  [figure: string]: unknown;
}

export const SCENARIOS: ReadonlyMap<string, Scenario> = new Map(
  (JSON.parse(readFileSync(join(REPO_DIR, "clients", "scenarios.json"), "utf8")) as { scenarios: Scenario[] }).scenarios.map(
    (s) => [s.id, s],
  ),
);

/** COVERED maps each scenario id to the test that covers it. */
export const COVERED = new Map<string, string>();

/** figure is a number of a scenario's entry. */
export function figure(spec: Scenario, name: string): number {
  const v = spec[name];
  if (typeof v !== "number") {
    throw new Error(`scenarios.json: ${spec.id} has no number ${name}`);
  }
  return v;
}

function record(id: string, result: "pass" | "fail" | "skip", reason: string, seconds: number): void {
  const path = process.env["LOCKD_SCENARIO_RESULTS"];
  if (!path) {
    return;
  }
  const line = JSON.stringify({ client: "typescript", id, result, reason, seconds: Math.round(seconds * 1000) / 1000 });
  appendFileSync(path, line + "\n");
}

/**
 * scenario is the TypeScript test of a scenario of scenarios.json: the
 * test gets the scenario's entry (its figures). A pending scenario is
 * skipped with "pending: <reason>" and not run; every outcome is recorded
 * for the Go harness.
 */
export function scenario(id: string, fn: (t: TestContext, spec: Scenario) => Promise<void>): void {
  const spec = SCENARIOS.get(id);
  if (spec === undefined) {
    throw new Error(`scenario ${id} is not in clients/scenarios.json`);
  }
  if (COVERED.has(id)) {
    throw new Error(`scenario ${id} has two tests`);
  }
  COVERED.set(id, spec.title);
  test(`scenario ${id}: ${spec.title}`, async (t) => {
    const began = performance.now();
    if (spec.pending) {
      const reason = "pending: " + spec.pending;
      record(id, "skip", reason, 0);
      t.skip(reason);
      return;
    }
    try {
      await fn(t, spec);
    } catch (err) {
      record(id, "fail", err instanceof Error ? `${err.name}: ${err.message}` : String(err), (performance.now() - began) / 1000);
      throw err;
    }
    record(id, "pass", "", (performance.now() - began) / 1000);
  });
}
