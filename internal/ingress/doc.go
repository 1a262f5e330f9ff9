// Package ingress is dedup's HTTP ingress (`dedup ingress`): producers that
// are not Go programs enqueue events over HTTP and get the same answers the
// Go client (package client) gives, because it is that client.
//
//	POST /v1/events            CloudEvents HTTP binding (structured
//	                           application/cloudevents+json, or binary ce-*
//	                           headers with any content type), or plain JSON
//	                           with an Idempotency-Key header
//	GET  /v1/workflows/{id}    ledger state, run ID, Temporal status, result
//
// The contract (schemas/openapi.yaml):
//
//   - 202 only after Kafka acknowledged the record: a 202 never loses an
//     event, whatever happens to the ingress or a router afterwards.
//   - The request is translated, byte for byte, into the Kafka binding of
//     the same event (binary: ce-* headers become ce_* headers, the
//     Content-Type the content-type header, the body the value;
//     structured and plain JSON: the body is the value; a plain object's
//     Idempotency-Key becomes the idempotency-key header, which
//     event_id.headers reads), then decoded and routed by the routers' own
//     code (client.Prepare). The event ID is what a router will say; an
//     Idempotency-Key that is not that ID (a CloudEvent's id is its key)
//     is a 400.
//   - The same key and payload again: the same 202 body (event ID, workflow
//     IDs, status URLs are functions of the request), and one execution per
//     workflow ID. The same key with another payload: 422 when the ledger
//     holds the first payload (the record is written anyway, so that the
//     router records the conflict and dead-letters it, as for any
//     producer); before the router claimed the first (usually well under a
//     second) the ledger cannot know: 202, and the status shows the
//     conflict.
//   - A second request with the key of one in flight (not yet answered):
//     409. In flight means between decoding and Kafka's acknowledgement.
//     Across replicas this is a PostgreSQL session advisory lock keyed by a
//     32-bit hash of the event ID, held on one connection per ingress
//     process (Locks): no table, nothing to expire, and a crashed process's
//     locks go with its session (behind a transaction pooler, postgres.pooler:
//     transaction, the connection holds a transaction open while it holds a
//     lock, so that its server session stays its own: NewPooledLocks).
//     Requests take turns on that connection, one
//     statement at a time; a statement runs to its end (at most 2 s) even if
//     its client hangs up, and only a failure of the connection ends the
//     session. Two different keys whose hashes collide, in flight on two
//     replicas at once, make a spurious 409 (retried); with PostgreSQL
//     unreachable, or its connection failed, the lock is per process only
//     (dedup_ingress_lock_degraded_total counts such requests, including
//     those in flight when the connection failed), and two replicas may each
//     answer 202 for one key: the routers still start the workflow once.
//   - Tenants (auth.go): each bearer token of ingress.tokens_file names a
//     tenant and what it may do (event types, routes, reading status: 403
//     otherwise). The ingress adds the tenant as the record's dedup-tenant
//     header, which the routers' eventid turns into the event ID
//     @{tenant}/{key}: two tenants' keys never meet. A status request
//     answers the owning tenant only; any other workflow ID (another
//     tenant's, a made-up one, one no router claimed yet) gets one and the
//     same 404. Without tokens_file every caller is the anonymous tenant
//     (unscoped keys, every right), and only on a loopback address unless
//     ingress.allow_unauthenticated.
//   - Limits (limits.go): each tenant's request rate (429 with
//     Retry-After), the requests one process answers at once (503 at
//     once, never queued), so that request bodies take at most
//     max_concurrent x max_body_bytes; header size and every phase's time
//     are bounded by the http.Server (run.go), and each PostgreSQL and
//     Temporal call by ingress.lookup_timeout.
//   - No key (ingress.require_key, the default: an Idempotency-Key, a
//     CloudEvents id or the id field): 400; an Idempotency-Key that is not
//     one RFC 8941 sf-string: 400. Bodies over ingress.max_body_bytes: 413;
//     content types it cannot read: 415; a missing or unknown bearer token:
//     401. Nothing is written for any of them. Errors are
//     application/problem+json (RFC 9457) with a reason and a Link to the
//     OpenAPI description.
//
// Files: server.go (the handlers and status codes), problem.go (the
// problem documents), run.go (serving it, TLS),
// translate.go (the HTTP binding to the Kafka binding), locks.go (the
// in-flight lock), auth.go (tenants' tokens and rights), limits.go (the
// tenant's rate and the process's cap), sfv.go (the Idempotency-Key as an
// RFC 8941 sf-string). The config section is internal/app/ingress.go;
// docs/idempotency-key.md maps the IETF draft's requirements to tests.
package ingress
