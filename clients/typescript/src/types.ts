// The API's shapes, by name: aliases of the types that openapi-typescript
// generates from api/openapi.yaml (api.ts), so that what the client
// answers is what the contract says, and a change to the contract is a
// change to these types.

import type { components } from "./api.js";

type Schemas = components["schemas"];

/** Any JSON value on a grant (at most 4 KiB); readers with the read scope see it. Never null. */
export type Value = Schemas["Value"];
/** How to hold a lock: "exclusive" (the default) or "shared". */
export type LockMode = Schemas["LockMode"];
/** How a grant holds its key; "permit" is a semaphore's. */
export type GrantMode = Schemas["GrantMode"];
/** A grant as the server answers it, without its token (the Lease keeps that). */
export type LeaseInfo = Omit<Schemas["Lease"], "token">;
/** A leadership as the server answers it, without its token. */
export type LeadershipInfo = Omit<Schemas["Leadership"], "token">;
/** The state of a live lock or semaphore (never a token). */
export type LockState = Schemas["LockState"];
export type Holder = Schemas["Holder"];
export type QueuedRequest = Schemas["Queued"];
export type QueuedWaiter = Schemas["QueuedWaiter"];
export type LockList = Schemas["LockList"];
export type SemaphoreList = Schemas["SemaphoreList"];
export type ReleaseResult = Schemas["ReleaseResult"];
export type ForceReleaseResult = Schemas["ForceReleaseResult"];
/** A request that a lock's holder step aside: who asked, why, when. */
export type ReleaseRequested = Schemas["ReleaseRequested"];
export type RequestReleaseResult = Schemas["RequestReleaseResult"];
export type History = Schemas["History"];
export type HistoryEvent = Schemas["Event"];
export type EventType = Schemas["EventType"];
/** An election (never a token). */
export type ElectionState = Schemas["ElectionState"];
export type Candidate = Schemas["Candidate"];
export type ElectionList = Schemas["ElectionList"];
export type ResignResult = Schemas["ResignResult"];
/** What an observer is told about a change of leadership (never a token). */
export type ElectionChange = Schemas["ElectionChange"];
/** One event of an election's observe stream: `leader`, `proclaimed` or `vacant`, and its change. */
export type ObserveEvent = Schemas["ObserveEvent"];
/** An RFC 9457 problem, as lockd answers errors. */
export type Problem = Schemas["Problem"];
/** Every problem code of the API. */
export type ProblemCode = Schemas["Problem"]["code"];
/** A session as the server answers it, without its id (a secret: only `session.id` shows it). */
export type SessionInfo = Omit<Schemas["Session"], "session">;
/** A session as POST /v1/sessions answers it: its id (`session`, a secret) included. */
export type CreatedSession = SessionInfo & { session: string };
/** A grant a session holds: its kind and key. */
export type SessionHold = Schemas["SessionHold"];
/** A lock set as the server answers it, without its token and proof (the LockSet keeps those). */
export type LockSetInfo = Omit<Schemas["LockSet"], "token" | "proof">;
/** One key of a lock set and its fence. */
export type LockSetLease = Schemas["LockSetLease"];
