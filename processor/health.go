package processor

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Dependency is a service the router cannot work without.
type Dependency uint8

// The dependencies the router reports the health of.
const (
	DepPostgres       Dependency = iota // the ledger and the dead-letter log
	DepTemporal                         // workflow starts
	DepKafka                            // the dead-letter topic
	DepSchemaRegistry                   // schemas of Schema Registry values (kafka.schema_registry)
	numDeps
)

func (d Dependency) String() string {
	switch d {
	case DepPostgres:
		return "postgres"
	case DepTemporal:
		return "temporal"
	case DepKafka:
		return "kafka"
	case DepSchemaRegistry:
		return "schema_registry"
	}
	return fmt.Sprintf("dependency(%d)", uint8(d))
}

// Op is one kind of call the router retries.
type Op uint8

// The calls the router retries, by kind.
const (
	OpClaim         Op = iota // Ledger.Claim
	OpStart                   // Starter.Start
	OpMark                    // Ledger.MarkStarted, MarkDeadLettered
	OpDeadLetter              // producing to the dead-letter topic
	OpDeadLetterLog           // DeadLetterLog.Written, Record
	OpOwn                     // Ledger.Own (the fence's epochs, on assignment)
	OpResolve                 // Decider.Resolve (the schema registry)
	numOps
)

func (o Op) String() string {
	return [...]string{"claim", "start", "mark", "dead_letter", "dead_letter_log", "own", "resolve"}[o]
}

// Dependency is what the operation calls.
func (o Op) Dependency() Dependency {
	switch o {
	case OpClaim, OpMark, OpDeadLetterLog, OpOwn:
		return DepPostgres
	case OpStart:
		return DepTemporal
	case OpResolve:
		return DepSchemaRegistry
	}
	return DepKafka
}

// health owns the router's view of its dependencies and the retry policy.
// Its guarantee: a dependency is down while every call currently using it
// is failing and none has succeeded for retry.max (one workflow whose start
// keeps failing while others start does not pause the replica); fetching is paused while any dependency is
// down, and resumes when a call to it succeeds or no failing call is left
// (a retry abandoned because its partition was revoked does not count as
// success, and does not keep the pause either). Transient errors are
// retried with capped exponential backoff and jitter; a Permanent error
// from a PostgreSQL call is fatal (permission denied, missing table: no
// amount of waiting fixes it), and ends the router with that error.
type health struct {
	cfg     Config
	log     *slog.Logger
	m       *metrics
	onPause func(paused bool) // called, under mu, when the pause changes
	fatalFn func(error)
	now     func() time.Time // the clock of the rule (tests step it)

	mu      sync.Mutex
	active  [numDeps]int // calls in a retry loop
	failing [numDeps]int // of those, failing at their last attempt
	lastErr [numDeps]error
	okAt    [numDeps]time.Time // last success
	down    [numDeps]bool      // as last evaluated (the rule depends on time)
	// paused is read without mu (the committer asks while holding its own
	// lock, which onPause takes under mu).
	paused atomic.Bool
}

func newHealth(cfg Config, log *slog.Logger, m *metrics, onPause func(bool), fatal func(error)) *health {
	return &health{cfg: cfg, log: log, m: m, onPause: onPause, fatalFn: fatal, now: time.Now}
}

// downLocked evaluates the rule for dependency d now.
func (h *health) downLocked(d Dependency) bool {
	return h.failing[d] > 0 && h.failing[d] == h.active[d] && h.now().Sub(h.okAt[d]) >= h.cfg.Retry.Max
}

// Paused reports whether fetching is paused.
func (h *health) Paused() bool { return h.paused.Load() }

// Why says which dependency fails, or nil.
func (h *health) Why() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for d := Dependency(0); d < numDeps; d++ {
		if h.down[d] {
			return fmt.Errorf("paused: %s failing: %w", d, h.lastErr[d])
		}
	}
	return nil
}

// update applies fn to the counters and reacts to a change of any
// dependency's state or of the pause.
func (h *health) update(d Dependency, fn func()) {
	h.mu.Lock()
	fn()
	wasDown, isDown := h.down[d], h.downLocked(d)
	h.down[d] = isDown
	if wasDown != isDown {
		h.m.dependencyUp.WithLabelValues(d.String()).Set(map[bool]float64{true: 0, false: 1}[isDown])
		if isDown {
			h.log.Warn("dependency down: pausing fetches", "dependency", d.String(), "err", h.lastErr[d])
		} else {
			h.log.Info("dependency answers again", "dependency", d.String())
		}
	}
	paused := false
	for x := Dependency(0); x < numDeps; x++ {
		paused = paused || h.down[x]
	}
	// Under mu, so that two updates cannot apply their pauses out of order.
	if paused != h.paused.Load() {
		h.paused.Store(paused)
		if h.onPause != nil {
			h.onPause(paused)
		}
	}
	h.mu.Unlock()
}

// retry runs fn until it succeeds, returns a permanent error, or ctx ends,
// backing off exponentially (with jitter) between transient errors.
func (h *health) retry(ctx context.Context, op Op, fn func(context.Context) error) error {
	d := op.Dependency()
	h.update(d, func() { h.active[d]++ })
	failing := false
	defer func() {
		h.update(d, func() {
			h.active[d]--
			if failing {
				h.failing[d]--
			}
		})
	}()
	wait := h.cfg.Retry.Initial
	for attempt := 0; ; attempt++ {
		err := fn(ctx)
		switch {
		case err == nil:
			h.update(d, func() { h.okAt[d] = h.now() })
			return nil
		case isFenced(err):
			// The ledger answered: the partition moved to another owner.
			// Not a failure of the dependency, and no retry changes it.
			h.update(d, func() { h.okAt[d] = h.now() })
			return err
		case isParked(err):
			// Temporal answered: one key waits (parked.go), the caller
			// parks it; not a failure of the dependency.
			h.update(d, func() { h.okAt[d] = h.now() })
			return err
		case IsPermanent(err):
			if d == DepPostgres {
				h.fatal(fmt.Errorf("%s: postgres refused for good (fix and restart): %w", op, err))
			}
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		}
		h.update(d, func() {
			h.lastErr[d] = err
			if !failing {
				h.failing[d]++
				failing = true
			}
		})
		h.m.retries.WithLabelValues(op.String()).Inc()
		if attempt == 0 || attempt%10 == 0 {
			h.log.Warn("retrying after transient error", "op", op.String(), "attempt", attempt+1, "err", err)
		}
		sleep := wait/2 + rand.N(wait/2+1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(sleep):
		}
		wait = min(wait*2, h.cfg.Retry.Max)
	}
}

func (h *health) fatal(err error) {
	h.log.Error("stopping: an error that waiting does not fix", "err", err)
	if h.fatalFn != nil {
		h.fatalFn(err)
	}
}

// Health is the router's state as the admin port reports it.
type Health struct {
	// InGroup: the router joined its consumer group (it has been assigned
	// its partitions, possibly none).
	InGroup bool
	// Down lists the dependencies the router holds down by the rule of
	// health (every call using one failed for retry.max): while any is,
	// fetching is paused.
	Down []Dependency
}

// Health says whether the router is in its group and which dependencies
// it holds down.
func (r *Router) Health() Health {
	h := Health{InGroup: r.commits.ready()}
	r.health.mu.Lock()
	defer r.health.mu.Unlock()
	for d := Dependency(0); d < numDeps; d++ {
		if r.health.down[d] {
			h.Down = append(h.Down, d)
		}
	}
	return h
}
