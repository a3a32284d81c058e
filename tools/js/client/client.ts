// A client of lockd generated from api/openapi.yaml by tools nobody here
// wrote: openapi-typescript makes the types (lockd.d.ts), openapi-fetch
// makes the calls. It takes, renews and releases a lock whose key has ':'
// in it, which openapi-fetch percent-encodes in the path as any correct
// client does (order:pay:1 goes out as order%3Apay%3A1).
//
// Usage: node dist/client.js http://127.0.0.1:PORT
// Prints one JSON line of what it saw; exits 1 on the first surprise.
import createClient from "openapi-fetch";
import type { paths } from "./lockd.js";

const baseUrl = process.argv[2];
if (!baseUrl) {
  console.error("usage: node dist/client.js BASE_URL");
  process.exit(2);
}

const sentPaths: string[] = [];
const lockd = createClient<paths>({ baseUrl });
lockd.use({
  onRequest({ request }) {
    sentPaths.push(new URL(request.url).pathname);
    return request;
  },
});

function fail(what: string, got: unknown): never {
  console.error(`ts client: ${what}: ${JSON.stringify(got)}`);
  process.exit(1);
}

const key = "order:pay:1";
const path = { params: { path: { key } } };

const acquired = await lockd.POST("/v1/locks/{key}/acquire", { ...path, body: { owner: "ts-client", ttl_ms: 30000 } });
if (!acquired.data) fail("acquire", { status: acquired.response.status, error: acquired.error });
const lease = acquired.data;
if (lease.key !== key || lease.owner !== "ts-client" || lease.count !== 1) fail("acquired lease", lease);

// Another acquirer gets the typed problem, with Retry-After.
const held = await lockd.POST("/v1/locks/{key}/acquire", { ...path, body: { owner: "someone-else" } });
if (held.response.status !== 409 || held.error?.code !== "lock_held" || held.error.holder !== "ts-client") {
  fail("second acquire", { status: held.response.status, error: held.error });
}
const retryAfter = Number(held.response.headers.get("Retry-After"));
if (!(retryAfter >= 1)) fail("Retry-After", held.response.headers.get("Retry-After"));

const renewed = await lockd.POST("/v1/locks/{key}/renew", { ...path, body: { token: lease.token, ttl_ms: 60000 } });
if (!renewed.data || renewed.data.fence !== lease.fence || renewed.data.ttl_ms !== 60000) fail("renew", renewed.error ?? renewed.data);

const state = await lockd.GET("/v1/locks/{key}", path);
if (!state.data || state.data.owner !== "ts-client" || state.data.renewals !== 1 || "token" in state.data) fail("state", state.error ?? state.data);

const released = await lockd.POST("/v1/locks/{key}/release", { ...path, body: { token: lease.token } });
if (!released.data || !released.data.released || released.data.count !== 0 || released.data.key !== key) fail("release", released.error ?? released.data);

const gone = await lockd.GET("/v1/locks/{key}", path);
if (gone.response.status !== 404 || gone.error?.code !== "not_found") fail("state after release", { status: gone.response.status, error: gone.error });

console.log(JSON.stringify({ key, fence: lease.fence, retryAfter, paths: sentPaths }));
