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
//     for that start instead of calling Temporal again; so does one whose
//     claim read the row before that start's mark left it started, if its
//     turn in the claimer comes after the mark (marked.go).
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
//
// # Where each rule lives
//
// One file per rule; the decision itself is pure and lives in
// processor/decide:
//
//   - The decision of a record before the ledger (decide/decide.go,
//     Decider.Decide): decode, event ID, routes, workflow IDs, a start
//     request only on demand (Decision.Start); dead letter before any
//     claim, no-route skip, tombstone skip. The poll loop, the operators'
//     tools (dedup explain, the offsets reset forecast) and the producer
//     client (client/, dedup ingress) all call it. From a decoded event to
//     its workflow IDs is Routes.Targets, which Decide uses on the routes it
//     matched.
//   - The verdict rule (decide/verdict.go, ClaimVerdict): a row's state,
//     same payload or not, inserted by this claim or not → verdict and
//     generation, and whether a dead_lettered row is claimed again. Both
//     ledgers read their answer with it (sink/ledger's claim statement and
//     the router tests' fake), as do dedup explain, the offsets reset
//     forecast and the producer client (Send, Status, Result). The ledger
//     row states (LedgerState: pending, started, dead_lettered) sit beside
//     the Ledger interface because processor does not import sink/ledger,
//     which names the same states ledger.State: no state is compared as a
//     bare string. The Ledger and Starter interfaces are declared here, by
//     their caller (ledger.go, starter.go, intent.go).
//   - The Ledger contract is one test suite (processor/ledgertest:
//     verdicts, re-claims, generations and the mark guard, concurrent
//     claims), run against PostgreSQL (sink/ledger/contract_test.go, the
//     reference) and against the router tests' fake
//     (processor/contract_test.go), so the fake cannot drift.
//   - Workflow ID formats (decide/workflowid.go): activity-{id}:{event_id},
//     activity-{id}:{scheduled_for} for key: scheduled_for routes, the
//     signal delivery key signal-{route}:{event_id}, and ParseWorkflowID.
//     Route matching and reuse policies: decide/routes.go; a signal route's
//     entity workflow ID template: template.go (SignalWithStart with the
//     delivery's request ID: starts.go and sink/starter; docs/signals.md).
//   - The poll loop (router.go): read_committed by default, transaction
//     markers finished at once, no rebalance between a poll and the
//     tracking of its records; the drain on shutdown.
//   - One claim per batch, acting on verdicts (claimer.go). One start in
//     flight per workflow ID (starts.go, startPool.submit): waiter
//     takeover, re-runs under allow_* and re-checks of copies that came too
//     late to wait; a start refused for good is finished only after its
//     dead letter and MarkDeadLettered; the marker.
//   - The decision log, one line per decision (new, redrive, rerun,
//     conflict, dead_letter, skipped_no_route; duplicates sampled):
//     claimer.go, deadletter.go, starts.go (rerun), router.go (no route).
//   - Dead letters (deadletter.go): one typed list of reasons; writes
//     acknowledged, then logged, never twice. A dead letter always fits: one
//     refused as too large is written again without its value, then without
//     its key and headers (flagged), and one that never fits stalls its own
//     partition only. This is also where a Kafka error while running is
//     classified (a dead letter too large for its topic).
//   - Tenants (tenantsig/tenantsig.go): the dedup-tenant header is taken only
//     with the ingress's HMAC signature over the record as written
//     (dedup-tenant-sig; keys of kafka.tenant_keys_file: the first signs,
//     every one verifies), else the record is dead-lettered forged_tenant
//     before any claim. The keyring file and the signature format are
//     there; the message and the check are eventid/tenant.go, which scopes
//     a tenant's event ID to @{tenant}/{key}.
//   - Health (health.go): retries with backoff, dependency down/up, the
//     fetch pause, fatal (permanent PostgreSQL) errors.
//   - Partitions and commits (committer.go; assign.go, commit.go): assigned, revoked, lost;
//     serialised from the read of the prefix to the record of what landed,
//     never backwards, nothing for a revoked or lost partition, a final
//     commit on shutdown. How far a partition may be committed, the end of
//     the contiguous prefix of finished records, is offsets.go (tracker).
//   - The ledger's fence on the router's side: the types in fence.go, the
//     handling in committer.assigned and committer.fenced (sink/ledger's
//     fence.go has the rule).
//   - Records in flight (inflight.go): capacity (MaxInFlight, the pause),
//     the drain on shutdown, a revoke's wait for its partitions' records.
//   - Consumer lag per owned partition and lost-range detection, records
//     retention deleted before they were read (lag.go).
//   - The router's config and its validation (config.go).
//   - dedup dlq replay (processor/replay; the command is
//     internal/ops/dlqreplay.go): dead letters back to their source topics,
//     whole (what a dead letter lacks is read from the source topic) and
//     with their first origin; a plan unless Execute.
//   - The protocol model and its properties: processor/model (SPIN,
//     make model).
package processor
