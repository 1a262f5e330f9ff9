// Package ledger is dedup's claim ledger in PostgreSQL.
//
// Guarantees:
//   - Claim answers a whole poll batch with one statement (one transaction,
//     one round trip; a second only in the rare cases documented on Claim).
//   - Of concurrent claims of one workflow ID, exactly one gets VerdictNew;
//     the others get VerdictRedrive while it is pending, VerdictDuplicate
//     once it is started. A claim that fails after its statement committed
//     (a lost connection) returns an error, not its VerdictNew: its retry
//     gets VerdictRedrive, which starts the workflow as VerdictNew would.
//   - Every statement that writes ledger rows locks them in key order,
//     whatever the batch's order and whatever the plan: the claim inserts
//     in key order (claimSQL's ORDER BY); the marks and the re-claim of
//     dead-lettered rows lock their rows first with a SELECT sorted by key
//     (lockInKeyOrder, marks.go), which on a small ledger, read by a
//     sequential scan, the UPDATE alone would not. Conflicts are written in
//     (workflow ID, payload hash) order. The purge never waits for a row
//     (FOR UPDATE SKIP LOCKED), unless its role may not lock rows
//     (dedup_operator: Purge). So two routers, or a router and its purge,
//     do not deadlock over the same rows.
//   - A claim is not a completion: a row stays 'pending' until MarkStarted,
//     and a pending row is handed out again (VerdictRedrive) on its next
//     claim, so a crash between claim and start loses nothing.
//   - The same workflow ID with another payload hash is VerdictConflict and
//     is recorded in dedup_conflicts; the ledger row is never overwritten.
//
// Deadlocks and lost connections surface as errors; all of them are safe to
// retry, because Claim and MarkStarted are idempotent.
//
// Lookup's query lives in the subpackage ledgerread, which producers use
// to read the ledger over read-only sessions without this package's
// migration code (goose); Lookup runs the same query on the ledger's pool.
//
// # Where each rule lives
//
//   - ledger.go: the Postgres type (pool, open, readiness); config.go: its
//     config and validation, among them PostgreSQL TLS: a server off this
//     machine must be verified (sslmode=verify-full or verify-ca) unless
//     postgres.allow_insecure.
//   - claim.go: the claim statement (one upsert per batch, lock order, the
//     latest row version; the read-only answer for started rows during
//     replays, by each ID's record first, migration
//     00015_ledger_by_record.sql) read with the router's verdict rule
//     (ClaimVerdict), and the
//     conflicts table: one row per workflow ID and payload hash, with its
//     copies and last-seen time (migration 00014_conflicts_by_hash.sql).
//   - marks.go: MarkStarted (a re-run moves a row to a newer generation
//     only) and MarkDeadLettered (pending rows only).
//   - fence.go: a per-partition owner epoch (dedup_partition_owners,
//     migration 00013) that a router bumps when it is assigned a partition
//     (Own, before it polls it). Every claim and mark carries its record's
//     epoch and share-locks the owner row in the same statement, so a router
//     that lost the partition (a zombie, a claim slow across a revoke)
//     changes no row: FencedError, and the router forgets the partition.
//   - errors.go: which errors are transient and which permanent, by
//     SQLSTATE; the pool is reset on a read-only server (25006).
//   - pooler/pooler.go: PostgreSQL behind a pooler (postgres.pooler: none,
//     session, transaction): what a connection may keep in its session
//     (unnamed statements only under transaction, no startup parameter
//     PgBouncer refuses), and the error naming the setting when a
//     transaction pooler is not named (26000, 42P05); applied by every pool
//     and connection of dedup's processes.
//   - migrate.go: the schema (schemas/migrations), migrations serialised by
//     an advisory lock and refused through a transaction pooler.
//   - The unique key (schemas/ledgerkey.go, migration 00012): the column
//     key, a 16-byte digest of the workflow ID that keeps a UUIDv7's or
//     ULID's milliseconds first, computed by the routers and readers
//     (LedgerKey); the SQL function dedup_ledger_key is the same rule for
//     rows written without it (TestLedgerKeyDigest holds the two together).
//     Every statement that finds a row by workflow ID goes through the key
//     and checks the ID, spelled by two helpers (LedgerRowsOf, LedgerRowIs).
//   - state.go: the row states as a type (State: StatePending, …), the
//     same as the router's LedgerState; no state is compared as a bare
//     string.
//   - stats.go: the gauges and counts (pending rows' age, row estimate,
//     rows per state).
//   - deadletters.go: the dead-letter log, so a redelivery is not
//     dead-lettered twice (migration 00002).
//   - purge.go: the purge; its WHERE is shared with the dry run, it works
//     in batches along the end-time indexes (migration 00007), conflicts go
//     by their last-seen time.
//   - schedule.go: schedule cursors (locked per tick, FOR UPDATE SKIP
//     LOCKED), decided fires, PostgreSQL's clock (migration 00006).
//   - inspect.go: the operators' read-only view (rows by workflow ID,
//     event ID or claiming record; conflicts, dead letters, stats, the
//     purge's count).
//   - lookup.go: reading the ledger for producers (Lookup), never a start
//     decision.
//   - replication.go: the server's replication as read at start
//     (Replication: synchronous_commit, synchronous_standby_names,
//     standbys), which internal/app's rule for a ledger a failover can
//     rewind judges.
//   - contract_test.go runs processor/ledgertest, the Ledger contract the
//     router tests' fake runs too.
package ledger
