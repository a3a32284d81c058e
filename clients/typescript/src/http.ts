// The wire: one HTTP request and its JSON answer or its error, an event
// stream's opening, backoff and timers. Only what Node 18 and browsers
// have: fetch, AbortController, ReadableStream, TextDecoder.
//
// Requests follow no redirects (a lock client must not send its API key
// and tokens wherever a 3xx points) and answers larger than lockd's are
// refused rather than read into memory.

import { LockdError, Unreachable, errorFor, parseRetryAfter } from "./errors.js";

/** The version of this client, sent in User-Agent. */
export const VERSION = "0.1.0";

// Answers larger than this are not lockd's.
const MAX_ANSWER = 8 << 20;

/**
 * Logger receives the client's few messages: retries (warn), renewals
 * that failed and are retried (info), leases lost (warn), an onLost
 * callback that threw (error). `console` is one. No message or field
 * holds a token or an API key.
 */
export interface Logger {
  debug?(message: string, fields?: Record<string, unknown>): void;
  info?(message: string, fields?: Record<string, unknown>): void;
  warn?(message: string, fields?: Record<string, unknown>): void;
  error?(message: string, fields?: Record<string, unknown>): void;
}

/** The fetch the client calls: the platform's, or one given in ClientOptions. */
export type Fetch = (input: string, init: RequestInit) => Promise<Response>;

export interface RequestOptions {
  body?: unknown;
  headers?: Record<string, string>;
  /** How long the whole answer may take. */
  timeoutMs: number;
  signal?: AbortSignal | undefined;
  /**
   * What messages call the request (default: its method and path): a
   * path with a secret in it (a session's id) is named without it.
   */
  label?: string | undefined;
}

/** Transport sends requests to one lockd server. */
export class Transport {
  /** The server's URL, without a trailing slash. */
  readonly baseUrl: string;
  // The API key is kept here only, to build each request's header: never
  // in a message, a log line or what util.inspect and JSON.stringify show.
  readonly #apiKey: string | undefined;
  readonly #fetch: Fetch;

  constructor(baseUrl: string, apiKey: string | undefined, fetchImpl: Fetch | undefined) {
    let u: URL;
    try {
      u = new URL(baseUrl);
    } catch {
      throw new TypeError(`lockd: baseUrl must be an http:// or https:// URL with a host, not ${JSON.stringify(baseUrl)}`);
    }
    if ((u.protocol !== "http:" && u.protocol !== "https:") || !u.host) {
      throw new TypeError(`lockd: baseUrl must be an http:// or https:// URL with a host, not ${JSON.stringify(baseUrl)}`);
    }
    if (u.username || u.password) {
      // Credentials in a URL end up in logs; the API key has its own option.
      throw new TypeError("lockd: pass the API key as apiKey, not in the URL");
    }
    this.baseUrl = u.origin + u.pathname.replace(/\/+$/, "");
    this.#apiKey = apiKey || undefined;
    const f = fetchImpl ?? (globalThis.fetch as Fetch | undefined);
    if (typeof f !== "function") {
      throw new TypeError("lockd: no fetch: Node 18 or later, a browser, or ClientOptions.fetch");
    }
    this.#fetch = f;
  }

  get hasApiKey(): boolean {
    return this.#apiKey !== undefined;
  }

  /**
   * request sends one request and returns its decoded 2xx answer. It
   * throws Unreachable when no answer came, the problem code's LockdError
   * subclass for any other status, and the signal's reason when the
   * signal aborts it.
   */
  async request<T>(method: string, path: string, opts: RequestOptions): Promise<T> {
    const headers = this.#headers("application/json", opts.headers);
    let body: string | undefined;
    if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
    }
    if (body !== undefined || method === "POST") {
      // A POST without a body (a session's renew) says JSON too: lockd
      // takes a POST from a browser only as JSON, and Node's fetch sends
      // a browser's headers (Sec-Fetch-Mode).
      headers["Content-Type"] = "application/json";
    }
    const what = opts.label ?? `${method} ${path}`;
    return this.#call(what, opts.timeoutMs, opts.signal, async (signal) => {
      const init: RequestInit = { method, headers, signal, redirect: "manual" };
      if (body !== undefined) {
        init.body = body;
      }
      const resp = await this.#fetch(this.baseUrl + path, init);
      const raw = await readCapped(resp, what);
      return answer<T>(what, resp, raw);
    });
  }

  /**
   * stream sends GET path and returns its 200 text/event-stream answer,
   * whose body the caller reads. timeoutMs bounds the wait for the
   * answer's head; signal closes the stream (give one: it is the only way
   * to close it). Errors are request's.
   */
  async stream(path: string, timeoutMs: number, signal: AbortSignal): Promise<Response> {
    const headers = this.#headers("text/event-stream", { "Cache-Control": "no-cache" });
    const what = `GET ${path}`;
    // The fetch is tied to signal for as long as the body is read; the
    // head alone is under the timeout.
    const head = new AbortController();
    const stop = () => head.abort(signal.reason);
    signal.addEventListener("abort", stop, { once: true });
    try {
      return await this.#call(what, timeoutMs, signal, async () => {
        const resp = await this.#fetch(this.baseUrl + path, {
          method: "GET",
          headers,
          signal: head.signal,
          redirect: "manual",
        });
        if (resp.status === 200) {
          const type = mediaType(resp.headers.get("Content-Type"));
          if (type === "text/event-stream") {
            return resp;
          }
          await resp.body?.cancel();
          throw new Unreachable(`${what}: the answer is ${type || "untyped"}, not an event stream; not lockd's`);
        }
        const raw = await readCapped(resp, what);
        throw problemOf(resp, raw);
      }, (reason) => head.abort(reason));
    } catch (err) {
      signal.removeEventListener("abort", stop);
      throw err;
    }
  }

  /**
   * #call runs fn under a timeout and the caller's signal, and turns a
   * failure to get an answer into Unreachable. onTimeout, when given,
   * aborts what fn started (default: fn's own signal).
   */
  async #call<T>(
    what: string,
    timeoutMs: number,
    signal: AbortSignal | undefined,
    fn: (signal: AbortSignal) => Promise<T>,
    onTimeout?: (reason: unknown) => void,
  ): Promise<T> {
    signal?.throwIfAborted();
    const ac = new AbortController();
    const abort = onTimeout ?? ((reason: unknown) => ac.abort(reason));
    const timer = setTimeout(() => {
      const reason = new Unreachable(`${what}: no answer from lockd within ${Math.round(timeoutMs)} ms`);
      ac.abort(reason);
      abort(reason);
    }, Math.max(timeoutMs, 1));
    const onAbort = () => {
      ac.abort(signal?.reason);
      abort(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      return await fn(ac.signal);
    } catch (err) {
      if (signal?.aborted) {
        throw signal.reason;
      }
      if (ac.signal.aborted) {
        throw ac.signal.reason;
      }
      if (err instanceof LockdError) {
        throw err;
      }
      // The request may or may not have reached the server.
      throw new Unreachable(`${what}: no answer from lockd: ${describe(err)}`, { cause: err });
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
  }

  #headers(accept: string, extra: Record<string, string> | undefined): Record<string, string> {
    const h: Record<string, string> = { Accept: accept, "User-Agent": `lockd-typescript/${VERSION}` };
    if (this.#apiKey !== undefined) {
      h["Authorization"] = `Bearer ${this.#apiKey}`;
    }
    return { ...h, ...extra };
  }
}

function answer<T>(what: string, resp: Response, raw: string): T {
  if (resp.status >= 200 && resp.status < 300) {
    let decoded: unknown = {};
    if (raw !== "") {
      try {
        decoded = JSON.parse(raw);
      } catch {
        throw new Unreachable(`${what}: the answer (${resp.status}) is not JSON; not lockd's`);
      }
    }
    if (typeof decoded !== "object" || decoded === null || Array.isArray(decoded)) {
      throw new Unreachable(`${what}: the answer (${resp.status}) is not a JSON object; not lockd's`);
    }
    return decoded as T;
  }
  throw problemOf(resp, raw);
}

/** problemOf is the error of a non-2xx answer, from its problem body when it has one. */
function problemOf(resp: Response, raw: string): LockdError {
  if (resp.status === 0 || (resp.status >= 300 && resp.status < 400)) {
    // A redirect, which a lock client does not follow (a browser's is opaque).
    return new Unreachable(`the server answered a redirect (${resp.status}); lockd does not: check baseUrl`, {
      status: resp.status || undefined,
    });
  }
  let problem: Record<string, unknown> = {};
  const type = mediaType(resp.headers.get("Content-Type"));
  if (type === "application/problem+json" || type === "application/json") {
    try {
      const decoded: unknown = JSON.parse(raw);
      if (typeof decoded === "object" && decoded !== null && !Array.isArray(decoded)) {
        problem = decoded as Record<string, unknown>;
      }
    } catch {
      // Not a problem: the status alone says what happened.
    }
  }
  return errorFor(resp.status, problem, parseRetryAfter(resp.headers.get("Retry-After")));
}

/** readCapped reads a body as text, refusing one larger than lockd's answers are. */
async function readCapped(resp: Response, what: string): Promise<string> {
  if (resp.body === null) {
    return "";
  }
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let size = 0;
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) {
      return text + decoder.decode();
    }
    size += value.byteLength;
    if (size > MAX_ANSWER) {
      await reader.cancel();
      throw new Unreachable(`${what}: the answer is larger than ${MAX_ANSWER} bytes; not lockd's`);
    }
    text += decoder.decode(value, { stream: true });
  }
}

function mediaType(value: string | null): string {
  return (value ?? "").split(";")[0]!.trim().toLowerCase();
}

/** describe names a connection failure without echoing anything sent. */
export function describe(err: unknown): string {
  if (!(err instanceof Error)) {
    return String(err);
  }
  // Node's fetch says "fetch failed" and puts the reason in cause.
  const cause = err.cause;
  if (cause instanceof Error) {
    const code = (cause as { code?: unknown }).code;
    return typeof code === "string" ? `${code} (${cause.message})` : `${cause.name}: ${cause.message}`;
  }
  return err.message ? `${err.name}: ${err.message}` : err.name;
}

/**
 * backoff is the delay in milliseconds before retry number attempt
 * (0-based): exponential from base up to ceiling, with jitter (half fixed,
 * half random) so that clients that failed together do not retry
 * together, and never shorter than the server's Retry-After.
 */
export function backoff(attempt: number, baseMs: number, ceilingMs: number, retryAfterMs?: number): number {
  let d = Math.min(baseMs * 2 ** Math.min(attempt, 20), ceilingMs);
  d = d / 2 + Math.random() * (d / 2);
  return Math.max(d, retryAfterMs ?? 0);
}

/** sleep resolves after ms; it rejects with the signal's reason when the signal aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const done = () => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    };
    const timer = setTimeout(done, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * unref lets the process exit while only this timer is pending (Node);
 * browsers have no such thing. A lease's renewals must not keep a
 * program alive that has nothing else to do.
 */
export function unref(timer: ReturnType<typeof setTimeout>): void {
  const t = timer as unknown as { unref?: () => void };
  if (typeof t.unref === "function") {
    t.unref();
  }
}

/** now is a monotonic clock in milliseconds. */
export function now(): number {
  return performance.now();
}
