// Package ledger is dedup's claim ledger in PostgreSQL.
//
// Guarantees:
//   - Claim answers a whole poll batch with one statement (one transaction,
//     one round trip; a second only in the rare cases documented on Claim).
//   - Of concurrent claims of one workflow ID, exactly one gets VerdictNew;
//     the others get VerdictRedrive while it is pending, VerdictDuplicate
//     once it is started.
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
package ledger
