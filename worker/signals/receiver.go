package signals

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"
)

// DefaultSignal is the signal name of a signal route that names none.
const DefaultSignal = "event"

// Defaults of Options' zero fields.
const (
	DefaultMaxSeen = 2000
	DefaultKeep    = 1000
)

// Options configure a Receiver. The zero value is usable.
type Options struct {
	// Signal is the signal name the route sends (its signal setting);
	// "" means DefaultSignal.
	Signal string
	// MaxSeen bounds one run: once it has handled this many events (read
	// from the channel or carried in, new and repeated alike: each read is
	// an event in the run's history), ShouldContinueAsNew is true. The run
	// holds at most Keep carried IDs plus MaxSeen of its own. Lower keeps
	// histories and memory small; higher continues-as-new less often. The
	// server's own suggestion (4096 history events or 4 MB, by default)
	// often comes first. Keep it well under the server's signal limit
	// (history.maximumSignalsPerExecution, 10,000 by default): the server
	// counts unread signals too, and refuses the entity's deliveries once
	// the run has that many, until it continues as new (the router waits:
	// docs/signals.md). 0 means DefaultMaxSeen (2,000, a fifth of it).
	MaxSeen int
	// Keep is how many event IDs State carries into the next run: the most
	// recently delivered ones. A repeat that reaches a later run is dropped
	// only if its ID is among them. Higher drops older repeats; each ID
	// costs its length plus about 25 bytes of the continue-as-new input,
	// which must fit the namespace's payload limit (limit.blobSize.error,
	// 2 MB by default; the server warns before). 0 means DefaultKeep.
	Keep int
	// KeepFor, if set, also limits the carried IDs to those delivered
	// within KeepFor (workflow time, whole seconds) before State: set it to
	// how long after a first delivery the router can re-drive an event
	// (the topic's retention, the dead-letter topic's for replays) so that
	// State carries no ID that can no longer come back. 0: no age limit.
	KeepFor time.Duration
}

// Validate reports the first field out of range.
func (o Options) Validate() error {
	switch {
	case o.MaxSeen < 0:
		return fmt.Errorf("signals: MaxSeen %d: want 0 (the default, %d) or more", o.MaxSeen, DefaultMaxSeen)
	case o.Keep < 0:
		return fmt.Errorf("signals: Keep %d: want 0 (the default, %d) or more", o.Keep, DefaultKeep)
	case o.KeepFor < 0:
		return fmt.Errorf("signals: KeepFor %s: want 0 (no age limit) or more", o.KeepFor)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Signal == "" {
		o.Signal = DefaultSignal
	}
	if o.MaxSeen == 0 {
		o.MaxSeen = DefaultMaxSeen
	}
	if o.Keep == 0 {
		o.Keep = DefaultKeep
	}
	return o
}

// State is what a run hands to the next across continue-as-new: put it in
// the workflow's input and pass it to NewReceiver. The zero State is a
// first run's.
type State struct {
	// Seen are the carried event IDs, in delivery order, oldest first.
	Seen []SeenID `json:"seen,omitempty"`
	// Pending are events the run read (drained) but did not deliver, in
	// arrival order: the next run delivers them first.
	Pending []Event `json:"pending,omitempty"`
}

// SeenID is a delivered event's ID and when it was delivered.
type SeenID struct {
	ID string `json:"id"`
	// At is the workflow time of the delivery, Unix seconds.
	At int64 `json:"at"`
}

// Stats say what a Receiver did in this run, for a query handler.
type Stats struct {
	Delivered int `json:"delivered"` // events returned by Receive and ReceiveBatch
	Dropped   int `json:"dropped"`   // repeats of an ID delivered before (this run or carried)
	Held      int `json:"held"`      // IDs held: carried plus delivered this run
	Pending   int `json:"pending"`   // carried events not delivered yet
}

// Receiver delivers a workflow's signalled events, each event ID once.
// See the package documentation for the contract.
type Receiver struct {
	ctx     workflow.Context
	opts    Options
	ch      workflow.ReceiveChannel
	pending []Event
	seen    map[string]struct{}
	order   []SeenID // the keys of seen, in delivery order
	handled int      // events read or taken from pending, this run
	stats   Stats
	closed  bool // State was called
}

// NewReceiver starts receiving opts.Signal in this run, after the events
// and IDs carried from the previous run (the zero State for a first run).
// Call it once per run, from the workflow function, before the first
// blocking call, and with the same Options in every run.
func NewReceiver(ctx workflow.Context, opts Options, carried State) (*Receiver, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	r := &Receiver{
		ctx:     ctx,
		opts:    opts,
		ch:      workflow.GetSignalChannel(ctx, opts.Signal),
		pending: append([]Event(nil), carried.Pending...),
		seen:    make(map[string]struct{}, len(carried.Seen)),
	}
	for _, s := range carried.Seen {
		if _, dup := r.seen[s.ID]; !dup {
			r.seen[s.ID] = struct{}{}
			r.order = append(r.order, s)
		}
	}
	return r, nil
}

// Receive returns the next event whose ID this chain of runs has not
// delivered before (carried events first, then signals in the order Temporal received them, which is not the events' order in Kafka: docs/signals.md),
// dropping repeats. It blocks until there is one.
//
// ok is false when the run should stop receiving: ctx is cancelled (and
// nothing is buffered), ShouldContinueAsNew is true (checked before each
// read, so that a flood of repeats, which Receive drops without
// returning, still ends the run), or State was called. Then return
// ctx.Err() if it is set, and otherwise continue as new with State: a
// workflow that completes instead forgets what it has seen.
//
// An event without an ID is delivered every time and never recorded.
func (r *Receiver) Receive(ctx workflow.Context) (ev Event, ok bool) {
	for !r.ShouldContinueAsNew() {
		ev, ok = r.next()
		if !ok {
			var stop bool
			if ev, ok, stop = r.wait(ctx, nil); stop {
				return Event{}, false
			}
		}
		if ok && r.admit(ctx, ev) {
			return ev, true
		}
	}
	return Event{}, false
}

// ReceiveBatch folds a burst: it waits for the next event (as Receive),
// then collects the events that arrive within window after it, up to
// limit events in all (limit <= 0: no limit), and returns them in order,
// each with its ID: the audit of what was folded. The window is a workflow
// timer, started only if the first events do not already fill the batch,
// and cancelled if it fills before the timer fires; window <= 0 takes only
// what is already
// buffered. Cancellation of ctx, or ShouldContinueAsNew becoming true,
// ends the window early: the events collected so far are returned (they
// are delivered: recorded as seen). ok is false when Receive's would be,
// with no event.
func (r *Receiver) ReceiveBatch(ctx workflow.Context, window time.Duration, limit int) (batch []Event, ok bool) {
	first, ok := r.Receive(ctx)
	if !ok {
		return nil, false
	}
	batch = []Event{first}
	full := func() bool { return limit > 0 && len(batch) >= limit }
	var timer workflow.Future
	cancelTimer := func() {}
	defer func() { cancelTimer() }()
	for !full() && !r.ShouldContinueAsNew() {
		ev, ok := r.next()
		if !ok {
			if window <= 0 {
				break
			}
			if timer == nil {
				var tctx workflow.Context
				tctx, cancelTimer = workflow.WithCancel(ctx)
				timer = workflow.NewTimer(tctx, window)
			}
			var stop bool
			if ev, ok, stop = r.wait(ctx, timer); stop {
				break
			}
		}
		if ok && r.admit(ctx, ev) {
			batch = append(batch, ev)
		}
	}
	return batch, true
}

// ShouldContinueAsNew says the run has handled MaxSeen events, or has
// handled one or more and the server suggests continuing as new (the
// history is long or large: a run always handles one, so that a chain
// whose every run starts above the server's threshold still progresses),
// or State was called. Receive and ReceiveBatch return false then; a
// workflow that does more than receive (activities, timers of its own)
// can ask too.
func (r *Receiver) ShouldContinueAsNew() bool {
	return r.closed || r.handled >= r.opts.MaxSeen ||
		(r.handled > 0 && workflow.GetInfo(r.ctx).GetContinueAsNewSuggested())
}

// State drains the signal channel and returns what the next run needs:
// the events drained or carried but not delivered (without repeats), and
// the last Keep delivered IDs (within KeepFor, if set). Call it only to
// continue as new, in the same workflow task as the continue-as-new
// error (without a blocking call in between): signals left unread in a
// run are lost when it continues as new. It closes the Receiver: Receive
// and ReceiveBatch return false afterwards.
func (r *Receiver) State() State {
	r.closed = true
	drained := r.pending
	r.pending = nil
	for {
		var ev Event
		if !r.ch.ReceiveAsync(&ev) {
			break
		}
		r.handled++
		drained = append(drained, ev)
	}
	var st State
	inPending := map[string]struct{}{}
	for _, ev := range drained {
		if ev.EventID != "" {
			_, seen := r.seen[ev.EventID]
			_, twice := inPending[ev.EventID]
			if seen || twice {
				r.stats.Dropped++
				continue
			}
			inPending[ev.EventID] = struct{}{}
		}
		st.Pending = append(st.Pending, ev)
	}
	keep := r.order
	if len(keep) > r.opts.Keep {
		keep = keep[len(keep)-r.opts.Keep:]
	}
	if r.opts.KeepFor > 0 {
		cutoff := workflow.Now(r.ctx).Add(-r.opts.KeepFor).Unix()
		i := 0
		for i < len(keep) && keep[i].At < cutoff {
			i++
		}
		keep = keep[i:]
	}
	st.Seen = append([]SeenID(nil), keep...)
	return st
}

// Stats returns this run's counts.
func (r *Receiver) Stats() Stats {
	s := r.stats
	s.Held, s.Pending = len(r.order), len(r.pending)
	return s
}

// next takes the next event without blocking: a carried one, else a
// buffered signal.
func (r *Receiver) next() (Event, bool) {
	if r.closed {
		return Event{}, false
	}
	if len(r.pending) > 0 {
		ev := r.pending[0]
		r.pending = r.pending[1:]
		r.handled++
		return ev, true
	}
	var ev Event
	if r.ch.ReceiveAsync(&ev) { // skips signals that do not decode (the SDK logs them)
		r.handled++
		return ev, true
	}
	return Event{}, false
}

// wait blocks until a signal arrives and reads it (ok; not ok for a
// signal that does not decode, which the SDK logs and skips), or until
// ctx is cancelled, the Receiver closed or the timer, if any, fired
// (stop).
func (r *Receiver) wait(ctx workflow.Context, timer workflow.Future) (ev Event, ok, stop bool) {
	if r.closed || ctx.Err() != nil {
		return Event{}, false, true
	}
	s := workflow.NewSelector(ctx)
	s.AddReceive(r.ch, func(c workflow.ReceiveChannel, _ bool) { ok = c.ReceiveAsync(&ev) })
	s.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { stop = true })
	if timer != nil {
		s.AddFuture(timer, func(workflow.Future) { stop = true })
	}
	s.Select(ctx)
	if ok {
		r.handled++
	}
	return ev, ok, stop
}

// admit records ev as delivered, unless its ID was delivered before.
func (r *Receiver) admit(ctx workflow.Context, ev Event) bool {
	if ev.EventID == "" {
		r.stats.Delivered++
		return true
	}
	if _, dup := r.seen[ev.EventID]; dup {
		r.stats.Dropped++
		workflow.GetLogger(ctx).Debug("dropping a repeated event", "event_id", ev.EventID, "delivery_id", ev.DeliveryID)
		return false
	}
	r.seen[ev.EventID] = struct{}{}
	r.order = append(r.order, SeenID{ID: ev.EventID, At: workflow.Now(ctx).Unix()})
	r.stats.Delivered++
	return true
}
