// Observer: an election's changes as they happen, from its event stream.
//
// GET /v1/elections/{name}/observe answers server-sent events: at once the
// current leader (`leader`) or `vacant`, then every change. The server
// sends a comment line (a heartbeat) at least every 15 s, so a stream
// silent for much longer than that is dead even when no FIN came (the
// server's host vanished): the observer gives it up after SILENCE_MS.

import { Unreachable } from "./errors.js";
import type { ObserveEvent } from "./types.js";

/** The longest a stream may say nothing, not even a heartbeat, before it is taken for dead. */
export const SILENCE_MS = 45_000;

// A longer line is not lockd's (an event's data is an ElectionChange,
// whose value is at most 4 KiB).
const MAX_LINE = 1 << 20;

const EVENTS: ReadonlySet<string> = new Set<ObserveEvent["event"]>(["leader", "proclaimed", "vacant"]);

export interface ObserveOptions {
  /** Ends the iteration (cleanly, as close() does) when it aborts. */
  signal?: AbortSignal | undefined;
  /** How long to wait for each event; then the stream is closed and next() rejects with a TimeoutError. No limit when left out. */
  timeoutMs?: number | undefined;
}

/**
 * Observer iterates over an election's changes: `{event, data}` where
 * `event` is "leader" (a new term; or the current leader when observing
 * begins), "proclaimed" (the leader's new value) or "vacant" (nobody
 * leads: `data.term` is the term that ended, 0 when none is known).
 *
 *     for await (const { event, data } of client.observe("billing:leader")) {
 *       console.log(event, data.term, data.leader, data.value);
 *     }
 *
 * The stream opens on the first next() (retrying 503s and connection
 * errors as reads do) and stays open until the loop ends (break, return,
 * an exception), close() is called, the signal aborts, or the server ends
 * it (then iteration ends: observe again, and the first event says where
 * things stand). A stream that breaks, or stays silent past SILENCE_MS
 * (not even a heartbeat), rejects with Unreachable.
 */
export class Observer implements AsyncIterableIterator<ObserveEvent> {
  readonly name: string;
  readonly #open: (signal: AbortSignal) => Promise<Response>;
  readonly #timeoutMs: number | undefined;
  readonly #signal: AbortSignal | undefined;
  readonly #close = new AbortController();
  readonly #onAbort = () => this.close();
  #reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
  readonly #decoder = new TextDecoder();
  #buffer = "";
  #ended = false;
  // next() calls run one after another.
  #queue: Promise<unknown> = Promise.resolve();

  /** @internal Observers come from Client.observe. */
  constructor(name: string, open: (signal: AbortSignal) => Promise<Response>, opts: ObserveOptions = {}) {
    if (opts.timeoutMs !== undefined && !(opts.timeoutMs > 0)) {
      throw new RangeError(`lockd: timeoutMs must be positive, got ${opts.timeoutMs}`);
    }
    this.name = name;
    this.#open = open;
    this.#timeoutMs = opts.timeoutMs;
    this.#signal = opts.signal;
    if (this.#signal?.aborted) {
      this.#close.abort();
    }
    this.#signal?.addEventListener("abort", this.#onAbort, { once: true });
  }

  /** Whether the stream is closed (close(), the signal, the loop's end, an error, or the server). */
  get closed(): boolean {
    return this.#close.signal.aborted;
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<ObserveEvent, undefined>> {
    const p = this.#queue.then(() => this.#next());
    this.#queue = p.catch(() => undefined);
    return p;
  }

  /** return closes the stream: what `break` out of a for await loop calls. */
  async return(): Promise<IteratorResult<ObserveEvent, undefined>> {
    this.close();
    return { done: true, value: undefined };
  }

  /** close ends the stream; a next() under way resolves as the end of the iteration. */
  close(): void {
    if (!this.#close.signal.aborted) {
      this.#close.abort();
    }
    this.#signal?.removeEventListener("abort", this.#onAbort);
  }

  toString(): string {
    return `Observer(${JSON.stringify(this.name)} ${this.closed ? "closed" : "open"})`;
  }

  async #next(): Promise<IteratorResult<ObserveEvent, undefined>> {
    const deadline = this.#timeoutMs === undefined ? undefined : Date.now() + this.#timeoutMs;
    let event = "";
    const data: string[] = [];
    for (;;) {
      const line = await this.#line(deadline);
      if (line === undefined) {
        this.close();
        return { done: true, value: undefined };
      }
      if (line === "") {
        // A blank line ends an event; one without data is nothing, and
        // one this client does not know (a newer server's) is skipped.
        if (data.length > 0 && EVENTS.has(event)) {
          return { done: false, value: this.#decode(event, data.join("\n")) };
        }
        event = "";
        data.length = 0;
        continue;
      }
      if (line.startsWith(":")) {
        continue; // a comment: the heartbeat
      }
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) {
        value = value.slice(1);
      }
      if (field === "event") {
        event = value;
      } else if (field === "data") {
        data.push(value);
      }
      // id and retry: lockd sends neither, and a new stream starts from
      // the current state anyway.
    }
  }

  /** #line is the stream's next line without its end; undefined once the stream is over or closed. */
  async #line(deadline: number | undefined): Promise<string | undefined> {
    for (;;) {
      const end = this.#buffer.search(/\r\n|\n|\r/);
      // A \r at the end of what came may be the first half of \r\n.
      if (end >= 0 && !(this.#buffer[end] === "\r" && end === this.#buffer.length - 1 && !this.#ended)) {
        const line = this.#buffer.slice(0, end);
        const sep = this.#buffer.startsWith("\r\n", end) ? 2 : 1;
        this.#buffer = this.#buffer.slice(end + sep);
        return line;
      }
      if (this.#buffer.length > MAX_LINE) {
        this.close();
        throw new Unreachable(`observe ${this.name}: a line longer than ${MAX_LINE} bytes; not lockd's`);
      }
      if (this.#ended) {
        return undefined;
      }
      const chunk = await this.#read(deadline);
      if (chunk === undefined) {
        this.#ended = true;
        this.#buffer += this.#decoder.decode();
        if (this.#buffer === "" || this.closed) {
          return undefined;
        }
      } else {
        this.#buffer += this.#decoder.decode(chunk, { stream: true });
      }
    }
  }

  /** #read is the stream's next bytes, opening it first; undefined at its end or once closed. */
  async #read(deadline: number | undefined): Promise<Uint8Array | undefined> {
    if (this.closed) {
      return undefined;
    }
    let wait = SILENCE_MS;
    if (deadline !== undefined) {
      const left = deadline - Date.now();
      if (left <= 0) {
        this.close();
        throw this.#timeout();
      }
      wait = Math.min(wait, left);
    }
    let silent = false;
    const timer = setTimeout(() => {
      silent = true;
      this.close();
    }, wait);
    try {
      if (this.#reader === undefined) {
        const resp = await this.#open(this.#close.signal);
        if (resp.body === null) {
          return undefined;
        }
        this.#reader = resp.body.getReader();
      }
      const { done, value } = await this.#reader.read();
      return done ? undefined : value;
    } catch (err) {
      if (silent) {
        throw this.#silence(deadline);
      }
      if (this.closed) {
        return undefined; // close() woke this read
      }
      this.close();
      if (err instanceof Unreachable || this.#reader === undefined) {
        throw err; // opening failed: the answer's own error
      }
      const why = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
      throw new Unreachable(`observe ${this.name}: the stream broke: ${why}`, { cause: err });
    } finally {
      clearTimeout(timer);
      if (this.closed && !silent) {
        void this.#reader?.cancel().catch(() => undefined);
      }
    }
  }

  #silence(deadline: number | undefined): Error {
    if (deadline !== undefined && Date.now() >= deadline - 1) {
      return this.#timeout();
    }
    return new Unreachable(`observe ${this.name}: the stream was silent for ${SILENCE_MS} ms, not even a heartbeat`);
  }

  #timeout(): Error {
    return new DOMException(`lockd: observe ${this.name}: no change within ${this.#timeoutMs} ms`, "TimeoutError");
  }

  #decode(event: string, data: string): ObserveEvent {
    let change: unknown;
    try {
      change = JSON.parse(data);
    } catch {
      change = undefined;
    }
    if (typeof change !== "object" || change === null || Array.isArray(change)) {
      this.close();
      throw new Unreachable(`observe ${this.name}: the data of a ${event} event is not a JSON object; not lockd's`);
    }
    return { event: event as ObserveEvent["event"], data: change as ObserveEvent["data"] };
  }
}
