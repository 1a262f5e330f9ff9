// Package ops is the operators' command line: dedup explain, inspect, lag,
// offsets reset and ledger stats / purge.
//
// It adds no state and no write to the router's path: every answer comes
// from what dedup already keeps (the record in Kafka, the group's committed
// offsets, dedup_ledger, dedup_conflicts, dedup_dead_letters, Temporal's
// executions), and the decision is re-computed with the router's own code
// (decide.Decider), never a second implementation of it.
//
// Every command is read-only except `offsets reset` and `ledger purge`
// with --execute, which log what they did; without it they print their
// plan and change nothing (as kafka-consumer-groups --reset-offsets). Clients are built the way
// dedup run builds its own (processor.Config.ClientOpts, internal/app DialToolTemporal;
// ledger.Open), so the same TLS and SASL settings apply.
//
// Exit codes, for scripts: 0 found (or done), 1 not found, 2 an error (a
// dependency that did not answer, so the answer is incomplete; bad usage;
// or a refusal: offsets reset while the group has live members, a purge
// that would cross the replay horizon).
//
// dedup dlq replay (dlqreplay.go, over processor/replay) sends dead letters
// back to their source topics, whole and with their first origin; it too
// prints its plan and writes nothing without --execute. The names of the
// disagreements between the ledger and Temporal (temporal_forgot,
// temporal_only, mark_not_landed, …) are defined here, once.
package ops
