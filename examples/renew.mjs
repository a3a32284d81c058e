#!/usr/bin/env node
// Hold a lockd lease from Node (18+) with the built-in fetch only.
//
// Acquire, renew every ttl/3 with a timer, stop the work as soon as a renew
// says the lease is gone (404 or 409), release at the end.
//
//   LOCKD_SERVER=http://127.0.0.1:8080 node renew.mjs KEY [TTL_MS] [WORK_SECONDS]
//
// Exit codes follow the lockd CLI: 0 done, 1 held, 3 lease lost, 4 unreachable.

const server = (process.env.LOCKD_SERVER ?? "http://127.0.0.1:8080").replace(/\/$/, "");
const apiKey = process.env.LOCKD_API_KEY ?? "";
const waitMs = Number(process.env.WAIT_MS ?? 5000); // how long to wait while the key is held

async function call(path, body) {
  const headers = { "Content-Type": "application/json" };
  if (apiKey) headers.Authorization = `Bearer ${apiKey}`;
  const res = await fetch(server + path, { method: "POST", headers, body: JSON.stringify(body) });
  return { status: res.status, body: await res.json() };
}

const [key, ttlArg, workArg] = process.argv.slice(2);
const ttlMs = Number(ttlArg ?? 30000);
const workMs = Number(workArg ?? 1) * 1000;

let acquired;
try {
  acquired = await call(`/v1/locks/${key}/acquire`, { ttl_ms: ttlMs, wait_ms: waitMs, owner: "renew.mjs" });
} catch (err) {
  console.error(`lockd unreachable: ${err.cause?.code ?? err.message}`);
  process.exit(4);
}
if (acquired.status === 409) {
  console.error(`${key} is held by ${acquired.body.holder}`);
  process.exit(1);
}
if (acquired.status !== 200) {
  console.error(`acquire: ${acquired.body.detail}`);
  process.exit(4);
}
const { token, fence } = acquired.body; // token is a secret: never log it
console.log(`acquired ${key} fence ${fence}`);

const work = new AbortController(); // aborted when the lease is lost
let finished = false; // a renew still in flight at the end is ignored
const timer = setInterval(async () => {
  try {
    const r = await call(`/v1/locks/${key}/renew`, { token });
    if (finished) return;
    if (r.status === 200) console.log("renewed");
    else if (r.status === 404 || r.status === 409) {
      console.error(`lost: ${r.body.detail}`);
      clearInterval(timer);
      work.abort();
    }
  } catch {
    // unreachable: try again next tick, while the lease lasts
  }
}, ttlMs / 3);

// The protected work: anything that takes an AbortSignal stops on loss.
const sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(t); reject(new Error("lease lost")); }, { once: true });
  });

let code = 0;
try {
  await sleep(workMs, work.signal);
  console.log("work done");
} catch {
  code = 3;
} finally {
  finished = true;
  clearInterval(timer);
  if (!work.signal.aborted) {
    const r = await call(`/v1/locks/${key}/release`, { token });
    console.log(r.status === 200 ? "released" : `release answered ${r.status}`);
  }
}
process.exit(code);
