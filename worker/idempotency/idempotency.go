// Package idempotency is a PostgreSQL-backed idempotency key store for
// activities that call the outside world (send an email, call a payment
// API), after Stripe's design.
//
// Do(key, fingerprint, fn) runs fn at most once to completion per key:
//   - the first caller takes a lease (status in_progress, lease_until) and
//     runs fn; its result is stored as completed;
//   - a later call with the same key returns the stored result without
//     running fn;
//   - a call while another caller holds a live lease gets *InProgressError
//     (or waits for it, with Options.Wait);
//   - a failed attempt is stored as failed, and the next call runs fn again;
//   - a lease that expired (its holder crashed) is taken over;
//   - the same key with another fingerprint (other request parameters) is a
//     *MismatchError, never a silent reuse of the stored result.
//
// Keys expire after a TTL; Reap deletes expired keys in batches.
//
// What it cannot promise: if fn's effect happened but the process died
// before the result was stored, the next holder runs fn again. Pass the key
// on to the outside service as its idempotency key (an Idempotency-Key
// header) so that it can drop that second call: that closes the gap.
package idempotency

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Options tune a Store.
type Options struct {
	// Lease is how long a holder may run fn before others may take over.
	// Longer than fn's worst case, or two holders may overlap.
	Lease time.Duration
	// TTL is how long a completed or failed key is kept.
	TTL time.Duration
	// Wait, if positive, makes Do wait up to this long for another
	// holder's lease to end instead of returning *InProgressError.
	Wait time.Duration
}

// DefaultOptions: a one-minute lease, keys kept a day, no waiting.
func DefaultOptions() Options { return Options{Lease: time.Minute, TTL: 24 * time.Hour} }

// Store is the key store. Its table is created by dedup's migrations.
type Store struct {
	pool *pgxpool.Pool
	o    Options
}

// New returns a store on pool.
func New(pool *pgxpool.Pool, o Options) (*Store, error) {
	if o.Lease <= 0 || o.TTL <= 0 || o.Wait < 0 {
		return nil, fmt.Errorf("idempotency options: lease %s, ttl %s, wait %s: want lease, ttl > 0, wait >= 0", o.Lease, o.TTL, o.Wait)
	}
	return &Store{pool: pool, o: o}, nil
}

// InProgressError: another caller holds a live lease on the key.
type InProgressError struct {
	Key        string
	LeaseUntil time.Time
}

func (e *InProgressError) Error() string {
	return fmt.Sprintf("idempotency key %s is in progress elsewhere until %s", e.Key, e.LeaseUntil.Format(time.RFC3339))
}

// MismatchError: the key was used with other request parameters.
type MismatchError struct{ Key string }

func (e *MismatchError) Error() string {
	return fmt.Sprintf("idempotency key %s was used with different parameters", e.Key)
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

// Do runs fn under key unless a result for key is stored already.
func (s *Store) Do(ctx context.Context, key string, fingerprint []byte, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	deadline := time.Now().Add(s.o.Wait)
	for {
		token, result, done, err := s.acquire(ctx, key, fingerprint)
		if err != nil {
			var ip *InProgressError
			if errors.As(err, &ip) && time.Now().Before(deadline) {
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(min(time.Until(deadline), 200*time.Millisecond)):
				}
				continue
			}
			return nil, err
		}
		if done {
			return result, nil
		}
		out, ferr := fn(ctx)
		if ferr != nil {
			if err := s.finish(ctx, key, token, "failed", nil, ferr.Error()); err != nil {
				return nil, errors.Join(ferr, err)
			}
			return nil, ferr
		}
		if err := s.finish(ctx, key, token, "completed", out, ""); err != nil {
			return nil, err
		}
		return out, nil
	}
}

// acquire takes the lease (token != "") or finds the stored result
// (done), in one statement.
func (s *Store) acquire(ctx context.Context, key string, fp []byte) (token string, result []byte, done bool, err error) {
	token = newToken()
	var (
		gotToken *string
		status   string
		storedFP []byte
		until    *time.Time
	)
	err = s.pool.QueryRow(ctx, `
WITH up AS (
	INSERT INTO idempotency_keys AS k (key, fingerprint, status, lease_token, lease_until, expires_at)
	VALUES ($1, $2, 'in_progress', $3, now() + $4::interval, now() + $5::interval)
	ON CONFLICT (key) DO UPDATE SET status = 'in_progress', lease_token = EXCLUDED.lease_token,
		lease_until = EXCLUDED.lease_until, attempts = k.attempts + 1, updated_at = now(), error = NULL
	WHERE k.fingerprint = EXCLUDED.fingerprint
		AND (k.status = 'failed' OR (k.status = 'in_progress' AND k.lease_until < now()))
	RETURNING k.lease_token, k.status, k.fingerprint, k.result, k.lease_until
)
SELECT lease_token, status, fingerprint, result, lease_until FROM up
UNION ALL
SELECT NULL, status, fingerprint, result, lease_until FROM idempotency_keys
WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM up)`, key, fp, token, s.o.Lease, s.o.TTL).Scan(&gotToken, &status, &storedFP, &result, &until)
	if errors.Is(err, pgx.ErrNoRows) {
		// Inserted and deleted (reaped) between the two halves: try again.
		return s.acquire(ctx, key, fp)
	}
	if err != nil {
		return "", nil, false, fmt.Errorf("acquiring idempotency key %s: %w", key, err)
	}
	switch {
	case gotToken != nil && *gotToken == token:
		return token, nil, false, nil
	case string(storedFP) != string(fp):
		return "", nil, false, &MismatchError{Key: key}
	case status == "completed":
		return "", result, true, nil
	}
	lu := time.Time{}
	if until != nil {
		lu = *until
	}
	return "", nil, false, &InProgressError{Key: key, LeaseUntil: lu}
}

// finish stores the outcome, if our lease is still the key's lease (it may
// have expired and been taken over: then the new holder's outcome stands).
func (s *Store) finish(ctx context.Context, key, token, status string, result []byte, errText string) error {
	_, err := s.pool.Exec(ctx, `
UPDATE idempotency_keys SET status = $3, result = $4, error = NULLIF($5, ''), lease_token = NULL, lease_until = NULL,
	updated_at = now(), expires_at = now() + $6::interval
WHERE key = $1 AND lease_token = $2`, key, token, status, result, errText, s.o.TTL)
	if err != nil {
		return fmt.Errorf("storing outcome of idempotency key %s: %w", key, err)
	}
	return nil
}

// Reap deletes expired keys, batch rows per statement, and returns how many.
func (s *Store) Reap(ctx context.Context, batch int) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE key IN (
			SELECT key FROM idempotency_keys WHERE expires_at < now() AND (status <> 'in_progress' OR lease_until < now()) LIMIT $1)`, batch)
		if err != nil {
			return total, fmt.Errorf("reaping idempotency keys: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
