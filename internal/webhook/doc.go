// Package webhook delivers lockd's lifecycle events to HTTP endpoints
// (--webhooks-file): signed, at least once, once per event however many
// lockd replicas run, across restarts, retried with exponential backoff.
//
// The outbox is the shared event stream itself (lock.Engine.EventStream),
// read through one Redis consumer group per endpoint. XREADGROUP hands each
// new event to one replica; the replica POSTs it and XACKs it on a 2xx. An
// event whose delivery failed (non-2xx, no answer within the timeout, the
// replica died) stays pending in the group: every second each replica looks
// at the pending events that have been idle for their backoff
// (BackoffMin·2^(attempts-1), at most BackoffMax) and claims them with
// XCLAIM's min-idle-time, which only one replica can win, then tries again.
// The backoff is always longer than the delivery timeout, so an attempt in
// flight is never claimed by another replica. An event is given up after
// GiveUpAfter (default 2 h) and counted.
//
// Caveats: delivery is at least once: a replica that dies between the 2xx
// and the XACK delivers again; receivers deduplicate by Lockd-Event-Id. An
// event still pending when the capped stream trims it (more than
// --events-max newer events) is lost and counted as dropped. A new endpoint
// starts with the events after its group was created.
package webhook
