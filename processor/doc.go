// Package processor is dedup's router: a Kafka consumer-group member that
// turns records into exactly-once workflow starts.
//
// For each poll batch it decodes every record's envelope and stable event
// ID (package eventid), maps the event to the routes it triggers (package
// decide: one Intent per route, workflow ID activity-{route}:{event_id}),
// claims all the batch's intents in the Ledger in one call, starts the new
// and re-driven ones through the Starter with bounded concurrency, marks
// them started in the ledger in batches, and commits offsets.
//
// A signal route (mode: signal) delivers each event instead, as a signal,
// into the entity workflow its workflow ID template names
// (SignalWithStart): its intents are claimed under the delivery key
// signal-{route}:{event_id} (decide.DeliveryKey) with the same verdicts, and go
// through the same start pool, marker and commits; a delivered event is
// never delivered again by the router (decide.Route.MayRerun), and a re-driven
// delivery carries one request ID, which Temporal drops within a run.
// docs/signals.md.
//
// Guarantees, and how they are kept:
//   - Nothing is lost: a record's offset is committed only when every one
//     of its intents is started (or already started), skipped as a
//     duplicate, or dead-lettered with the write acknowledged. Per
//     partition, the commit is the end of the contiguous prefix of finished
//     records (tracker), so one slow or retried start holds back only the
//     offsets after it.
//   - Nothing is started twice: the ledger hands out a workflow ID once as
//     new; a claim left pending by a crash is re-driven, and Temporal's
//     deterministic workflow ID with reject-duplicate turns a second start
//     into "already started", which counts as success. A re-send that
//     arrives while this router is still starting the same workflow waits
//     for that start instead of calling Temporal again.
//   - Rebalances: on revoke, in-flight records of the revoked partitions get
//     RevokeTimeout to finish, then what finished is committed and the rest
//     is abandoned uncommitted (the new owner re-drives it). On loss, nothing
//     is committed. Commits carry the group generation, so a zombie's late
//     commit is rejected by the broker.
//   - Shutdown (context cancelled): polling stops, in-flight work drains for
//     up to DrainTimeout, a final commit is made, and the group is left.
//   - Bad input never blocks a partition: undecodable, type-less, ID-less,
//     oversized and conflicting records, and permanent Temporal rejections,
//     go to the dead-letter topic with the reason in headers. Transient
//     errors (PostgreSQL, Temporal, Kafka) are retried with capped
//     exponential backoff and never dead-lettered.
package processor
