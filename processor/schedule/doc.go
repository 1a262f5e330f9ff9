// Package schedule fires cron triggers as workflow starts with the seed
// contract's IDs, activity-{activity_id}:{scheduled_for} (UTC,
// 2026-03-01T09:00:00+00:00), and a misfire policy for slots it could not
// fire on time: skip, catchup (at most N, oldest first) or compress (one
// run whose window covers them all). See docs/schedules.md.
//
// Guarantees, and how they are kept:
//   - At most one execution per slot, with any number of replicas and no
//     leader: each tick locks the triggers' cursors in PostgreSQL (FOR
//     UPDATE SKIP LOCKED), decides, and commits the decision (the fires,
//     with their windows, and the moved cursor) before any start. Every
//     fire is then claimed in the ledger and started with reject-duplicate
//     like an event (decide.Intent, processor.Starter), so a replay of
//     it (a crash after the decision or after the start, a second replica)
//     is "already started".
//   - One start call per fire in the common case: the replica that
//     decided a trigger's fires holds the trigger (Round.Holder, in the
//     same transaction) until it has started them, and other replicas
//     leave it alone meanwhile. A holder that dies is waited for until its
//     hold ends (min(MaxHold, misfire threshold - tick)).
//   - Overlap (Trigger.Overlap, Temporal's ScheduleOverlapPolicy): under
//     skip, the default of misfire_policy skip, no slot starts while the
//     trigger's newest fire is pending or its run is open (Temporal's
//     DescribeWorkflowExecution, asked inside the round, the trigger
//     locked); such slots are counted skipped_overlap and logged.
//   - No slot lost, no second window: a decided fire stays pending in
//     PostgreSQL until started; the next tick of any replica holding the
//     trigger starts it as it was decided. A slot is decided once: the
//     cursor moves past it in the same transaction.
//   - No refire when the clock goes backwards: nothing after the cursor
//     is due. Production reads PostgreSQL's clock (one clock for every
//     replica); tests inject theirs (Clock).
//   - Bounded work after any outage: a decision calls Next at most
//     MaxWalk times from the cursor, then searches back from now.
//   - One slot, one hash (decide.SlotPayloadHash): a slot fired twice,
//     here or through a route with key scheduled_for, is a duplicate,
//     never a conflict.
//
// Files: config.go (triggers and their validation; dedupe_key_strategy is
// misfire_policy), cron.go (cron with ISC DST rules over go-cron's parser
// and Next), decide.go (the misfire decision: skip, catchup, compress, a
// bounded walk), scheduler.go (the tick: the decision committed before any
// start, fires claimed and started like intents). The cursors and decided
// fires are sink/ledger's schedule.go.
package schedule
