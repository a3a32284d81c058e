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
// Up to Concurrency deliveries (default 8) to one endpoint are in flight at
// once, each XACKed when it ends; the loop reads only as many new events as
// slots are free, so that no event waits in a replica long enough to be
// claimed by another. An endpoint that takes 20 ms per request receives
// about 330 events/s, not 45 (BenchmarkSlowReceiver).
//
// Each endpoint has its own HTTP client: it follows no redirect (a 3xx is
// a failed delivery), and unless the hook has AllowPrivate it refuses to
// connect to a loopback, private or link-local address, checked when it
// dials, after DNS (net.Dialer.Control).
//
// Caveats: delivery is at least once: a replica that dies between the 2xx
// and the XACK delivers again; receivers deduplicate by Lockd-Event-Id.
// With a concurrency above 1, events reach an endpoint out of order, those
// of one key too: receivers order them by id; concurrency 1 delivers in
// the stream's order, but a retried event comes after later ones. An
// event still pending when the capped stream trims it (more than
// --events-max newer events) is lost and counted as dropped. A new endpoint
// starts with the events after its group was created.
package webhook
