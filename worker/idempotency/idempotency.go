// Package idempotency is a PostgreSQL-backed idempotency key store for
// calls to the outside world (send an email, call a payment API), after
// Stripe's design.
//
// Do(key, fingerprint, fn) runs fn at most once to an outcome per key:
//   - the first caller takes a lease (status in_progress, lease_until, a
//     lease token) and runs fn; while fn runs, the holder renews the lease
//     every third of it (as Temporal heartbeats do), so a call slower than
//     the lease is never overlapped by its own retry;
//   - fn's success is stored as completed: later calls return the stored
//     result without running fn;
//   - fn's error is stored as failed, and the next call runs fn again; an
//     error wrapped with Permanent is stored as failed_permanent and
//     returned to every later call of the same generation, without running
//     fn again;
//   - a call while another caller holds a live lease gets *InProgressError
//     (or waits for it, with Options.Wait);
//   - a lease that expired (its holder crashed or stalled past it) is taken
//     over; the stalled holder, if it comes back, finds its lease token
//     gone: its fn is cancelled (renewal notices first) or its failure is
//     refused, and it gets *LeaseLostError, a double execution that is
//     logged and counted;
//   - a success is never dropped: a holder's success is stored unless the
//     key already holds one, even when its lease was taken over (the
//     effect did happen, so a third call must not run it again) and even
//     when the reaper deleted its key while it stalled (the outcome is
//     inserted again). Reaping is invisible to a holder: one that comes
//     back to a reaped key takes it back at its next renewal, as it would
//     have renewed the expired row;
//   - the same key with another fingerprint (other request parameters) is a
//     *MismatchError, never a silent reuse of the stored result;
//   - the outcome is stored on a context detached from the caller's, with
//     its own timeout (Options.FinishTimeout): an effect that happened just
//     before the caller's deadline is still recorded.
//
// Generations (DoInGeneration): a key records the generation of the run
// that holds it or recorded its outcome (dedup's dedup_generation: 1 for
// the first run of a workflow ID, one more per re-run). A failed outcome,
// permanent or not, belongs to the generation that failed:
//   - a newer generation takes the key over and runs fn again, under the
//     same store key, with its own parameters (a new attempt of the same
//     effect, say after an operator fixed a URL: no *MismatchError), and
//     under a new external key if the failure was answered (see External
//     keys); a completed key returns its stored result to it, whatever its
//     parameters (the effect happened once);
//   - the same generation gets what it got before: the stored success, the
//     stored permanent failure, or a new attempt after a retryable one;
//   - an older generation (a stale caller: its run was superseded) never
//     runs fn and never changes the key: it gets the stored success, if
//     any, else *SupersededError.
//
// Generation 0 (Do, or a run started without a generation) is unfenced:
// it is never older than the key's, never newer; it never takes over a
// permanent failure.
//
// External keys (DoKeyed): what fn sends to the outside service as its
// idempotency key. Services that honour one (Stripe; the IETF draft
// draft-ietf-httpapi-idempotency-key-header) bind it to its first request
// for good: a repeat gets the saved answer, a saved 500 as well, and a
// repeat with another body is refused (422). So the external key is the
// store key plus the key's epoch (ExternalKey: key at epoch 0, key:epoch
// after), and the epoch grows by one when a newer generation takes over a
// failure the service answered (a failed or failed_permanent outcome whose
// error was not marked Unanswered and whose call was not cut short): the
// new attempt goes out under a key the service has not bound to that
// failure. Everything else keeps the external key:
//   - an in_progress key taken over after its lease expired (a crashed or
//     stalled holder), in any generation, and a failure of unknown outcome
//     (Unanswered, or fn's context ended): the service may have made the
//     effect, and only the same key lets it drop the repeat;
//   - the retries of a generation: a retryable failure runs again under
//     the same external key (a 5xx does not prove the effect was not made;
//     a service that saves failures, as Stripe does, answers them with the
//     saved 5xx until the generation's attempts run out, and the next
//     generation's attempt goes out under a new key);
//   - an expired key starts again at epoch 0, as it starts again as new.
//
// A service that honours the key answers a repeat with its first answer,
// so an answered failure means that the key is not bound to a success
// there: a new key cannot repeat an effect the service made under the old
// one.
//
// Keys expire TTL after their outcome. An expired key is absent: the next
// call runs fn again, with any parameters and in any generation, whether
// or not the reaper has deleted it yet. Maintain reaps expired keys (never
// a live lease) at start and then periodically, and refreshes the
// keys-by-state gauge.
//
// What it cannot promise: if fn's effect happened but the process died
// before the outcome was stored, the next holder runs fn again. Pass the
// external key (DoKeyed) on to the outside service as its idempotency key
// (an Idempotency-Key header, a Message-ID) so that it can drop that second
// call.
//
// The package is one file, over ~750 lines, because it is one concern: the
// key store's protocol (take, renew, finish, expire) and its SQL.
package idempotency

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Options tune a Store.
type Options struct {
	// Lease is how long a holder that stopped renewing (crashed, stalled)
	// keeps the key before another caller may take it over. The holder
	// renews it every Lease/3 while fn runs, so it need not exceed fn's
	// duration; it bounds how long a crashed holder's key stays blocked.
	Lease time.Duration
	// TTL is how long a completed or failed key is kept (and so how late a
	// retry or a re-run still finds it).
	TTL time.Duration
	// Wait, if positive, makes Do wait up to this long for another
	// holder's lease to end instead of returning *InProgressError.
	Wait time.Duration
	// FinishTimeout bounds storing fn's outcome, on a context detached from
	// the caller's (whose deadline may have passed). 0 means 10s.
	FinishTimeout time.Duration
}

// DefaultOptions returns a one-minute lease, keys kept a day, no waiting.
func DefaultOptions() Options { return Options{Lease: time.Minute, TTL: 24 * time.Hour} }

// Status values of a key.
const (
	StatusInProgress      = "in_progress"
	StatusCompleted       = "completed"
	StatusFailed          = "failed"
	StatusFailedPermanent = "failed_permanent"
)

// Store is the key store. Its table is created by dedup's migrations.
type Store struct {
	pool    *pgxpool.Pool
	o       Options
	log     *slog.Logger
	metrics *metrics
}

// New returns a store on pool. log may be nil (no logs); reg may be nil
// (metrics kept but not exposed).
func New(pool *pgxpool.Pool, o Options, log *slog.Logger, reg prometheus.Registerer) (*Store, error) {
	if o.Lease <= 0 || o.TTL <= 0 || o.Wait < 0 || o.FinishTimeout < 0 {
		return nil, fmt.Errorf("idempotency options: lease %s, ttl %s, wait %s, finish timeout %s: want lease, ttl > 0 and the others >= 0",
			o.Lease, o.TTL, o.Wait, o.FinishTimeout)
	}
	if o.FinishTimeout == 0 {
		o.FinishTimeout = 10 * time.Second
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Store{pool: pool, o: o, log: log, metrics: m}, nil
}

// ExternalKey is the key a call of key at epoch sends to the outside
// service: key itself at epoch 0, key:epoch after (see the package doc).
func ExternalKey(key string, epoch int) string {
	if epoch <= 0 {
		return key
	}
	return fmt.Sprintf("%s:%d", key, epoch)
}

// Fingerprint hashes request parameters (JSON-encoded) for Do.
func Fingerprint(params any) ([]byte, error) {
	b, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("fingerprinting parameters: %w", err)
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// ErrLeaseLost is the cause of the context fn gets when the holder's
// renewal finds the lease gone (context.Cause).
var ErrLeaseLost = errors.New("idempotency lease lost")

// Do runs fn under key unless an outcome for key is stored already. It
// is DoInGeneration in generation 0 (unfenced).
func (s *Store) Do(ctx context.Context, key string, fingerprint []byte, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	return s.DoInGeneration(ctx, key, 0, fingerprint, fn)
}

// DoInGeneration runs fn under key for a caller of generation gen (the
// run's generation; 0: none, unfenced), unless the key's outcome answers
// it (see the package doc: a failed outcome of an older generation is
// tried again, a success answers every generation). It is DoKeyed for an
// fn that sends no key.
func (s *Store) DoInGeneration(ctx context.Context, key string, gen int, fingerprint []byte, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	return s.DoKeyed(ctx, key, gen, fingerprint, func(ctx context.Context, _ string) ([]byte, error) { return fn(ctx) })
}

// DoKeyed is DoInGeneration with fn given the external key of this call
// (ExternalKey: the key, with the key's epoch once a newer generation took
// over a failure the service answered), for fn to send to the outside
// service as its idempotency key.
func (s *Store) DoKeyed(ctx context.Context, key string, gen int, fingerprint []byte, fn func(ctx context.Context, externalKey string) ([]byte, error)) ([]byte, error) {
	if gen < 0 {
		return nil, fmt.Errorf("idempotency key %s: generation %d: want 0 or more", key, gen)
	}
	c := call{key: key, gen: gen, fp: fingerprint}
	deadline := time.Now().Add(s.o.Wait)
	for {
		a, err := s.acquire(ctx, c)
		if err != nil {
			var ip *InProgressError
			if errors.As(err, &ip) {
				s.metrics.calls.WithLabelValues("busy").Inc()
				if time.Now().Before(deadline) {
					select {
					case <-ctx.Done():
						return nil, ctx.Err()
					case <-time.After(min(time.Until(deadline), 200*time.Millisecond)):
					}
					continue
				}
			}
			var se *SupersededError
			if errors.As(err, &se) {
				s.log.Warn("a caller of an older generation than its idempotency key's: not run", "key", key,
					"generation", gen, "key_generation", se.KeyGeneration)
			}
			return nil, err
		}
		switch a.status {
		case StatusCompleted:
			s.metrics.calls.WithLabelValues("stored").Inc()
			return a.result, nil
		case StatusFailedPermanent:
			s.metrics.calls.WithLabelValues("stored").Inc()
			return nil, &PermanentError{Err: errors.New(a.errText)}
		}
		c.token, c.held, c.epoch = a.token, a.held, a.epoch
		if a.tookOver {
			s.metrics.takeovers.Inc()
			s.log.Warn("took over an idempotency key whose holder's lease expired; the call runs again, under the same external key",
				"key", key, "external_key", ExternalKey(key, c.epoch))
		}
		s.metrics.calls.WithLabelValues("ran").Inc()
		return s.run(ctx, c, fn)
	}
}

// call is one caller of a key: what it asks for, and its lease token once
// it holds the key.
type call struct {
	key   string
	gen   int
	fp    []byte
	token string
	// held is the generation the key records for this holder's lease:
	// its own, or the key's when the caller's is 0 (unfenced). Whatever
	// this holder writes carries it.
	held int
	// epoch is the key's epoch under this holder's lease: its call goes
	// out under ExternalKey(key, epoch), and what it writes carries it.
	epoch int
}

// run runs fn under the lease token, renewing it, and stores the outcome.
func (s *Store) run(ctx context.Context, c call, fn func(context.Context, string) ([]byte, error)) ([]byte, error) {
	fctx, cancelFn := context.WithCancelCause(ctx)
	defer cancelFn(nil)
	// Renewal lasts as long as fn does, even past the caller's deadline:
	// the lease says "the call is still running here".
	rctx, stopRenew := context.WithCancel(context.WithoutCancel(ctx))
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		s.renew(rctx, c, func() { cancelFn(ErrLeaseLost) })
	}()
	out, ferr := fn(fctx, ExternalKey(c.key, c.epoch))
	// A failure after fn's context ended (the caller's deadline, a lost
	// lease) is of unknown outcome, whatever fn made of it: the call was
	// cut short.
	cutShort := fctx.Err() != nil
	stopRenew()
	<-renewed

	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.FinishTimeout)
	defer cancel()
	o := outcome{status: StatusCompleted, result: out}
	if ferr != nil {
		o = outcome{status: StatusFailed, errText: ferr.Error(), answered: !IsUnanswered(ferr) && !cutShort}
		if IsPermanent(ferr) {
			o.status = StatusFailedPermanent
		}
	}
	ours, stored, err := s.finish(dctx, c, o)
	switch {
	case err != nil && ferr != nil:
		return nil, errors.Join(ferr, err)
	case err != nil:
		return nil, err
	case !ours:
		return nil, s.lost(c.key, stored, ferr)
	case ferr != nil:
		return nil, ferr
	}
	return out, nil
}

func (s *Store) lost(key string, stored bool, ferr error) error {
	s.metrics.lostLeases.Inc()
	s.log.Error("idempotency key's lease was taken over while its call ran: the call may have run twice",
		"key", key, "result_stored", stored, "call_err", ferr)
	return &LeaseLostError{Key: key, Stored: stored, Err: ferr}
}

// outcome is what fn came to.
type outcome struct {
	status  string // completed, failed, failed_permanent
	result  []byte
	errText string
	// answered: a failure the outside service answered (not Unanswered,
	// not cut short); a newer generation takes it over under a new
	// external key.
	answered bool
}

// finish stores fn's outcome. It is ours if our lease was still the key's
// lease: then the outcome is stored. Otherwise:
//   - a success is never dropped: it is stored (stored) unless the key
//     holds a success already, even over another holder's lease or
//     failure, with our fingerprint, generation and epoch (so that a newer
//     generation reads it as the effect made, not as a mismatch), since
//     the effect did happen; the other holder's renewal or finish then
//     finds its lease gone;
//   - a failure never overwrites another holder's state.
//
// A key the reaper deleted while we stalled (past our lease and its
// expiry), and that nobody took since, gets our outcome inserted, as if it
// had not been reaped (ours).
func (s *Store) finish(ctx context.Context, c call, o outcome) (ours, stored bool, err error) {
	var reaped bool
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for {
			var (
				leaseToken *string
				status     string
			)
			err := tx.QueryRow(ctx, `SELECT lease_token, status FROM idempotency_keys WHERE key = $1 FOR UPDATE`, c.key).
				Scan(&leaseToken, &status)
			if errors.Is(err, pgx.ErrNoRows) {
				tag, err := tx.Exec(ctx, `
INSERT INTO idempotency_keys (key, fingerprint, status, result, error, expires_at, generation, epoch, answered)
VALUES ($1, $2, $3, $4, NULLIF($5, ''), now() + $6::interval, $7, $8, $9)
ON CONFLICT (key) DO NOTHING`, c.key, c.fp, o.status, o.result, o.errText, s.o.TTL, c.held, c.epoch, o.answered)
				if err != nil {
					return err
				}
				if tag.RowsAffected() == 0 {
					continue // another caller inserted it meanwhile: decide on its row
				}
				ours, stored, reaped = true, true, true
				return nil
			}
			if err != nil {
				return err
			}
			ours = leaseToken != nil && *leaseToken == c.token
			if !ours && (o.status != StatusCompleted || status == StatusCompleted) {
				return nil
			}
			_, err = tx.Exec(ctx, `
UPDATE idempotency_keys SET status = $2, result = $3, error = NULLIF($4, ''), lease_token = NULL, lease_until = NULL,
	fingerprint = $5, generation = $6, updated_at = now(), expires_at = now() + $7::interval, epoch = $8, answered = $9
WHERE key = $1`, c.key, o.status, o.result, o.errText, c.fp, c.held, s.o.TTL, c.epoch, o.answered)
			stored = err == nil
			return err
		}
	})
	if err != nil {
		return false, false, fmt.Errorf("storing the outcome of idempotency key %s: %w", c.key, err)
	}
	if reaped {
		s.log.Warn("an idempotency key was reaped while its holder stalled past its lease; its outcome is recorded anew",
			"key", c.key, "status", o.status)
	}
	return ours, stored, nil
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
