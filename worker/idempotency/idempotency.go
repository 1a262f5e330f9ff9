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
//     returned to every later call, without running fn again;
//   - a call while another caller holds a live lease gets *InProgressError
//     (or waits for it, with Options.Wait);
//   - a lease that expired (its holder crashed or stalled past it) is taken
//     over; the stalled holder, if it comes back, finds its lease token
//     gone: its fn is cancelled (renewal notices first) or its outcome is
//     refused, and it gets *LeaseLostError, a double execution that is
//     logged and counted. One exception to the fence: a success is never
//     dropped. If the key has no stored success, the stalled holder's
//     success is stored (the effect did happen), so a third call does not
//     run the effect again;
//   - the same key with another fingerprint (other request parameters) is a
//     *MismatchError, never a silent reuse of the stored result;
//   - the outcome is stored on a context detached from the caller's, with
//     its own timeout (Options.FinishTimeout): an effect that happened just
//     before the caller's deadline is still recorded.
//
// Keys expire TTL after their outcome. An expired key is absent: the next
// call runs fn again, with any parameters, whether or not the reaper has
// deleted it yet. Maintain reaps expired keys (never a live lease) at start
// and then periodically, and refreshes the keys-by-state gauge.
//
// What it cannot promise: if fn's effect happened but the process died
// before the outcome was stored, the next holder runs fn again. Pass the key
// on to the outside service as its idempotency key (an Idempotency-Key
// header, a Message-ID) so that it can drop that second call.
//
// The package is one file, over ~450 lines, because it is one concern: the
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

// InProgressError is returned when another caller holds a live lease on
// the key.
type InProgressError struct {
	Key        string
	LeaseUntil time.Time
	// Remaining is how long the lease still runs (by the database's
	// clock): the earliest a retry can take over, if its holder stops
	// renewing it.
	Remaining time.Duration
}

func (e *InProgressError) Error() string {
	return fmt.Sprintf("idempotency key %s is in progress elsewhere until %s", e.Key, e.LeaseUntil.Format(time.RFC3339))
}

// MismatchError is returned when the key was used with other request
// parameters.
type MismatchError struct{ Key string }

func (e *MismatchError) Error() string {
	return fmt.Sprintf("idempotency key %s was used with different parameters", e.Key)
}

// LeaseLostError is returned when this holder's lease was taken over while
// fn ran, so fn may have run twice (here and in the holder that took
// over). Stored says whether this holder's success was kept anyway (the
// key had none); Err is fn's own error, if it failed. The key's stored
// outcome, not this holder's, is the answer: call Do again to read it.
type LeaseLostError struct {
	Key    string
	Stored bool
	Err    error
}

func (e *LeaseLostError) Error() string {
	s := fmt.Sprintf("idempotency key %s: the lease was lost while the call ran (it may have run twice)", e.Key)
	switch {
	case e.Err != nil:
		s += ": " + e.Err.Error()
	case e.Stored:
		s += "; its result was stored, the key had none"
	}
	return s
}

// PermanentError marks an error that will not go away by trying again (a
// rejected request, an invalid address): Do stores it as failed_permanent
// and returns it to every later call of the key without running fn.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err as a *PermanentError (nil stays nil).
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	var pe *PermanentError
	if errors.As(err, &pe) {
		return err
	}
	return &PermanentError{Err: err}
}

// IsPermanent says whether err is, or wraps, a *PermanentError.
func IsPermanent(err error) bool {
	var pe *PermanentError
	return errors.As(err, &pe)
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

// Do runs fn under key unless an outcome for key is stored already.
func (s *Store) Do(ctx context.Context, key string, fingerprint []byte, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	deadline := time.Now().Add(s.o.Wait)
	for {
		a, err := s.acquire(ctx, key, fingerprint)
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
		if a.tookOver {
			s.metrics.takeovers.Inc()
			s.log.Warn("took over an idempotency key whose holder's lease expired; the call runs again", "key", key)
		}
		s.metrics.calls.WithLabelValues("ran").Inc()
		return s.run(ctx, key, fingerprint, a.token, fn)
	}
}

// run runs fn under the lease token, renewing it, and stores the outcome.
func (s *Store) run(ctx context.Context, key string, fp []byte, token string, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	fctx, cancelFn := context.WithCancelCause(ctx)
	defer cancelFn(nil)
	// Renewal lasts as long as fn does, even past the caller's deadline:
	// the lease says "the call is still running here".
	rctx, stopRenew := context.WithCancel(context.WithoutCancel(ctx))
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		s.renew(rctx, key, token, func() { cancelFn(ErrLeaseLost) })
	}()
	out, ferr := fn(fctx)
	stopRenew()
	<-renewed

	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.FinishTimeout)
	defer cancel()
	if ferr == nil {
		ours, stored, err := s.complete(dctx, key, fp, token, out)
		if err != nil {
			return nil, err
		}
		if !ours {
			return nil, s.lost(key, stored, nil)
		}
		return out, nil
	}
	status := StatusFailed
	if IsPermanent(ferr) {
		status = StatusFailedPermanent
	}
	ours, err := s.fail(dctx, key, token, status, ferr.Error())
	if err != nil {
		return nil, errors.Join(ferr, err)
	}
	if !ours {
		return nil, s.lost(key, false, ferr)
	}
	return nil, ferr
}

func (s *Store) lost(key string, stored bool, ferr error) error {
	s.metrics.lostLeases.Inc()
	s.log.Error("idempotency key's lease was taken over while its call ran: the call may have run twice",
		"key", key, "result_stored", stored, "call_err", ferr)
	return &LeaseLostError{Key: key, Stored: stored, Err: ferr}
}

// renew extends the lease every third of it until ctx ends; it calls lost
// (once) and returns when the lease is no longer this holder's.
func (s *Store) renew(ctx context.Context, key, token string, lost func()) {
	t := time.NewTicker(s.o.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, s.o.Lease/3)
		tag, err := s.pool.Exec(qctx, `
UPDATE idempotency_keys SET lease_until = now() + $3::interval, expires_at = greatest(expires_at, now() + $3::interval), updated_at = now()
WHERE key = $1 AND lease_token = $2 AND status = 'in_progress'`, key, token, s.o.Lease)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			// PostgreSQL did not answer: try again at the next tick. If
			// the lease runs out meanwhile, another caller may take over,
			// and the next renewal (or the outcome) says so.
			s.log.Warn("renewing an idempotency lease", "key", key, "err", err)
		case tag.RowsAffected() == 0:
			lost()
			return
		}
	}
}

type acquired struct {
	token    string // set when this caller holds the lease
	status   string
	result   []byte
	errText  string
	tookOver bool
}

// acquire takes the lease (token != "") or finds the stored outcome, in one
// statement. An expired key (past expires_at, and no live lease) is
// treated as absent: it is taken as new, whatever its fingerprint.
func (s *Store) acquire(ctx context.Context, key string, fp []byte) (acquired, error) {
	token := newToken()
	for {
		var (
			gotToken *string
			status   string
			storedFP []byte
			result   []byte
			errText  *string
			until    *time.Time
			left     *float64
			tookOver bool
		)
		err := s.pool.QueryRow(ctx, `
WITH up AS (
	INSERT INTO idempotency_keys AS k (key, fingerprint, status, lease_token, lease_until, expires_at)
	VALUES ($1, $2, 'in_progress', $3, now() + $4::interval, now() + greatest($4::interval, $5::interval))
	ON CONFLICT (key) DO UPDATE SET
		status = 'in_progress', lease_token = EXCLUDED.lease_token, lease_until = EXCLUDED.lease_until,
		error = NULL, result = NULL, updated_at = now(), fingerprint = EXCLUDED.fingerprint,
		attempts = CASE WHEN k.expires_at < now() THEN 1 ELSE k.attempts + 1 END,
		created_at = CASE WHEN k.expires_at < now() THEN now() ELSE k.created_at END,
		expires_at = CASE WHEN k.expires_at < now() THEN EXCLUDED.expires_at ELSE greatest(k.expires_at, EXCLUDED.lease_until) END,
		taken_over_at = CASE WHEN k.status = 'in_progress' THEN now() ELSE k.taken_over_at END
	WHERE NOT (k.status = 'in_progress' AND k.lease_until >= now())
		AND (k.expires_at < now()
			OR (k.fingerprint = EXCLUDED.fingerprint AND k.status IN ('failed', 'in_progress')))
	RETURNING k.lease_token, k.status, k.fingerprint, k.result, k.error, k.lease_until, k.taken_over_at IS NOT DISTINCT FROM now()
)
SELECT lease_token, status, fingerprint, result, error, lease_until, NULL::float8, taken_over
FROM up AS u(lease_token, status, fingerprint, result, error, lease_until, taken_over)
UNION ALL
SELECT NULL, status, fingerprint, result, error, lease_until, extract(epoch FROM lease_until - now())::float8, false FROM idempotency_keys
WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM up)`, key, fp, token, s.o.Lease, s.o.TTL).
			Scan(&gotToken, &status, &storedFP, &result, &errText, &until, &left, &tookOver)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // inserted and deleted (reaped) between the two halves: try again
		}
		if err != nil {
			return acquired{}, fmt.Errorf("acquiring idempotency key %s: %w", key, err)
		}
		switch {
		case gotToken != nil && *gotToken == token:
			return acquired{token: token, status: status, tookOver: tookOver}, nil
		case string(storedFP) != string(fp):
			return acquired{}, &MismatchError{Key: key}
		case status == StatusCompleted || status == StatusFailedPermanent:
			a := acquired{status: status, result: result}
			if errText != nil {
				a.errText = *errText
			}
			return a, nil
		}
		ip := &InProgressError{Key: key}
		if until != nil {
			ip.LeaseUntil = *until
		}
		if left != nil && *left > 0 {
			ip.Remaining = time.Duration(*left * float64(time.Second))
		}
		return acquired{}, ip
	}
}

// complete stores fn's success. It is ours if our lease was the key's
// lease. A success is never dropped: if the lease was taken over but the
// key holds no success yet (the other holder is still running, or failed),
// ours is stored all the same (stored), since the effect did happen. A
// success already stored stands.
func (s *Store) complete(ctx context.Context, key string, fp []byte, token string, result []byte) (ours, stored bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var (
			leaseToken  *string
			status      string
			fingerprint []byte
		)
		err := tx.QueryRow(ctx, `SELECT lease_token, status, fingerprint FROM idempotency_keys WHERE key = $1 FOR UPDATE`, key).
			Scan(&leaseToken, &status, &fingerprint)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // reaped after our lease lapsed: nothing to store in
		}
		if err != nil {
			return err
		}
		ours = leaseToken != nil && *leaseToken == token
		if !ours && (status == StatusCompleted || string(fingerprint) != string(fp)) {
			return nil
		}
		_, err = tx.Exec(ctx, `
UPDATE idempotency_keys SET status = 'completed', result = $2, error = NULL, lease_token = NULL, lease_until = NULL,
	updated_at = now(), expires_at = now() + $3::interval
WHERE key = $1`, key, result, s.o.TTL)
		stored = err == nil
		return err
	})
	if err != nil {
		return false, false, fmt.Errorf("storing the outcome of idempotency key %s: %w", key, err)
	}
	return ours, stored, nil
}

// fail stores fn's error, only while our lease is the key's lease: a
// failure never overwrites another holder's state.
func (s *Store) fail(ctx context.Context, key, token, status, errText string) (ours bool, err error) {
	tag, err := s.pool.Exec(ctx, `
UPDATE idempotency_keys SET status = $3, error = $4, lease_token = NULL, lease_until = NULL,
	updated_at = now(), expires_at = now() + $5::interval
WHERE key = $1 AND lease_token = $2`, key, token, status, errText, s.o.TTL)
	if err != nil {
		return false, fmt.Errorf("storing the outcome of idempotency key %s: %w", key, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Reap deletes expired keys, batch rows per statement, and returns how
// many. A key whose lease is live is never deleted, however old: its
// holder is still running and renewing it.
func (s *Store) Reap(ctx context.Context, batch int) (int64, error) {
	var total int64
	for {
		// The outer conditions repeat the inner ones: a row renewed after
		// the subquery chose it is re-checked at its new version.
		tag, err := s.pool.Exec(ctx, `
DELETE FROM idempotency_keys WHERE key IN (
	SELECT key FROM idempotency_keys WHERE expires_at < now() AND (status <> 'in_progress' OR lease_until < now())
	LIMIT $1 FOR UPDATE SKIP LOCKED)
AND expires_at < now() AND (status <> 'in_progress' OR lease_until < now())`, batch)
		if err != nil {
			return total, fmt.Errorf("reaping idempotency keys: %w", err)
		}
		total += tag.RowsAffected()
		s.metrics.reaped.Add(float64(tag.RowsAffected()))
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// RefreshStats sets the keys-by-state gauge from the table.
func (s *Store) RefreshStats(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, `SELECT status, count(*) FROM idempotency_keys WHERE expires_at >= now() GROUP BY status`)
	if err != nil {
		return fmt.Errorf("counting idempotency keys: %w", err)
	}
	counts := map[string]float64{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			rows.Close()
			return err
		}
		counts[st] = float64(n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("counting idempotency keys: %w", err)
	}
	for _, st := range []string{StatusInProgress, StatusCompleted, StatusFailed, StatusFailedPermanent} {
		s.metrics.keys.WithLabelValues(st).Set(counts[st])
	}
	return nil
}

// Maintain reaps expired keys at once and then every reapEvery, and
// refreshes the keys-by-state gauge every 30s (or every reapEvery, if
// shorter), until ctx ends.
func (s *Store) Maintain(ctx context.Context, reapEvery time.Duration, batch int) {
	reap := func() {
		if n, err := s.Reap(ctx, batch); err != nil {
			s.log.Warn("reaping idempotency keys", "err", err)
		} else if n > 0 {
			s.log.Info("reaped idempotency keys", "keys", n)
		}
	}
	stats := func() {
		if err := s.RefreshStats(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("counting idempotency keys", "err", err)
		}
	}
	reap()
	stats()
	rt := time.NewTicker(reapEvery)
	defer rt.Stop()
	st := time.NewTicker(min(reapEvery, 30*time.Second))
	defer st.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-rt.C:
			reap()
		case <-st.C:
			stats()
		}
	}
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
