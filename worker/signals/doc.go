// Package signals is the workflow side of dedup's signal routes. A signal
// route delivers each matching Kafka event to a long-lived entity workflow
// (SignalWithStartWorkflowExecution, signal "event" by default, payload
// Event); a Receiver, created in that workflow, hands the events to it,
// each event ID once:
//
//	r, err := signals.NewReceiver(ctx, signals.Options{}, in.Signals)
//	if err != nil {
//		return st, err
//	}
//	for {
//		ev, ok := r.Receive(ctx) // or r.ReceiveBatch(ctx, window, limit)
//		if !ok {
//			break
//		}
//		st = apply(st, ev)
//	}
//	if err := ctx.Err(); err != nil {
//		return st, err // cancelled
//	}
//	return st, workflow.NewContinueAsNewError(ctx, Name, Input{State: st, Signals: r.State()})
//
// Receive returns false when the run should end: cancelled, or
// ShouldContinueAsNew (MaxSeen events handled, or the server suggests
// it). The workflow then continues as new, never completes: a completed
// workflow forgets what it has seen.
//
// # Why the workflow drops repeats
//
// The router sends an event again when it cannot know that the signal
// landed (a crash between the signal and its offset commit, a retried
// call, a dead-letter replay). Temporal drops a signal re-sent with the
// same request ID only within one run's mutable state: not after the run
// continued as new, nor once it closed. The Receiver drops the rest.
//
// # The contract
//
//   - Within a run, Receive never returns an event ID it returned before
//     in this run or that the run received in State.Seen. Events without
//     an ID are returned every time, never recorded.
//   - Across continue-as-new the bound is what State carries: the last
//     Options.Keep IDs delivered (in the whole chain of runs, not only the
//     last run), and of those only the ones delivered within
//     Options.KeepFor, when it is set. A repeat of an older event is
//     delivered again. Keep is a count because the continue-as-new input
//     must stay under the payload limit whatever the event rate; KeepFor
//     is for a router whose re-drive window is a time (topic retention).
//   - A workflow that completes, fails or is terminated forgets: a
//     re-drive after that starts a new chain (SignalWithStart) that has
//     seen nothing, and delivers the event again. Entity workflows that
//     must not repeat an event should continue as new, never complete.
//   - No event is lost across continue-as-new: State drains the signal
//     channel (ReceiveAsync until empty) and carries what it read but did
//     not deliver, with the carried-in events not delivered yet, as
//     State.Pending; the next run delivers them first, in order. A signal
//     that reaches the server while the run's last workflow task is being
//     completed makes the server reject the continue-as-new; the task runs
//     again with the signal in history, and State drains it.
//   - State comes from history only: signals read, workflow time, and the
//     carried input. Receive issues no commands; ReceiveBatch starts one
//     timer per batch (only when its first events do not fill it) and
//     cancels it if the batch fills first. Changing that sequence would
//     break the replay of running workflows: it would need a
//     workflow.GetVersion in this package.
//   - Memory per run: at most Keep carried IDs plus MaxSeen of its own,
//     if the workflow continues as new when ShouldContinueAsNew says so.
//
// Signals whose payload does not decode as an Event are skipped by the
// SDK (it logs them and counts temporal_corrupted_signals).
//
// docs/signals-workflow.md has the same for a reader of the route's
// documentation, and the example in package example.
package signals
