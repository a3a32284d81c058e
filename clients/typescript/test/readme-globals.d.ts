// What the examples of README.md call but do not define: tsc checks the
// examples against these (scripts/test.mjs), and readme.test.ts gives
// the ones it runs.
import type { Client } from "lockd-client";

declare global {
  var client: Client;
  var order: { id: string };
  var scene: string;
  function buildReport(work: { signal: AbortSignal; fence: number }): Promise<void>;
  function charge(order: { id: string }, under: { fence: number; signal: AbortSignal }): Promise<void>;
  function render(scene: string, under: { signal: AbortSignal; fence: number }): Promise<void>;
  function serveWhileLeading(lead: { signal: AbortSignal; term: number }): Promise<void>;
}
