package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The lease: taking a key (acquire, and decide, the rule of what a caller
// finds there) and renewing it while fn runs.

// renew extends the lease every third of it until ctx ends; it calls lost
// (once) and returns when the lease is no longer this holder's. A key the
// reaper deleted while this holder stalled (past its lease and the key's
// expiry) is taken back if nobody took it meanwhile: reaping an expired
// key changes nothing that renewing the expired row would not.
func (s *Store) renew(ctx context.Context, c call, lost func()) {
	t := time.NewTicker(s.o.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, s.o.Lease/3)
		held, back, err := s.renewOnce(qctx, c)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			// PostgreSQL did not answer: try again at the next tick. If
			// the lease runs out meanwhile, another caller may take over,
			// and the next renewal (or the outcome) says so.
			s.log.Warn("renewing an idempotency lease", "key", c.key, "err", err)
		case back:
			s.log.Warn("an idempotency key was reaped while its holder stalled past its lease; the holder took it back", "key", c.key)
		case !held:
			lost()
			return
		}
	}
}

// renewOnce extends the lease (held), or re-inserts the holder's lease on
// a reaped key (held, back); neither: another caller has the key.
func (s *Store) renewOnce(ctx context.Context, c call) (held, back bool, err error) {
	tag, err := s.pool.Exec(ctx, `
UPDATE idempotency_keys SET lease_until = now() + $3::interval, expires_at = greatest(expires_at, now() + $3::interval), updated_at = now()
WHERE key = $1 AND lease_token = $2 AND status = 'in_progress'`, c.key, c.token, s.o.Lease)
	if err != nil || tag.RowsAffected() == 1 {
		return err == nil, false, err
	}
	tag, err = s.pool.Exec(ctx, `
INSERT INTO idempotency_keys (key, fingerprint, status, lease_token, lease_until, expires_at, generation, epoch)
VALUES ($1, $2, 'in_progress', $3, now() + $4::interval, now() + $4::interval, $5, $6)
ON CONFLICT (key) DO NOTHING`, c.key, c.fp, c.token, s.o.Lease, c.held, c.epoch)
	if err != nil {
		return false, false, err
	}
	return tag.RowsAffected() == 1, tag.RowsAffected() == 1, nil
}

type acquired struct {
	token    string // set when this caller holds the lease
	held     int    // the key's generation under this caller's lease
	epoch    int    // the key's epoch under this caller's lease
	status   string
	result   []byte
	errText  string
	tookOver bool
}

// acquire takes the lease (token != "") or finds the stored outcome, in one
// statement. The lease is taken when no live lease holds the key and
//   - the key is expired (past expires_at): absent, taken as new, whatever
//     its fingerprint and generation;
//   - it is failed, or in_progress with an expired lease, and the caller's
//     generation is newer than the key's (any fingerprint), or neither
//     newer nor older with the same fingerprint;
//   - it is failed_permanent and the caller's generation is newer.
//
// Taking the lease sets the key's epoch: 0 for an expired key, one more
// when a newer generation takes over an answered failure, else unchanged.
//
// Otherwise the row answers: decide says how.
func (s *Store) acquire(ctx context.Context, c call) (acquired, error) {
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
			keyGen   int
			epoch    int
		)
		err := s.pool.QueryRow(ctx, `
WITH up AS (
	INSERT INTO idempotency_keys AS k (key, fingerprint, status, lease_token, lease_until, expires_at, generation)
	VALUES ($1, $2, 'in_progress', $3, now() + $4::interval, now() + greatest($4::interval, $5::interval), $6)
	ON CONFLICT (key) DO UPDATE SET
		status = 'in_progress', lease_token = EXCLUDED.lease_token, lease_until = EXCLUDED.lease_until,
		error = NULL, result = NULL, updated_at = now(), fingerprint = EXCLUDED.fingerprint,
		attempts = CASE WHEN k.expires_at < now() THEN 1 ELSE k.attempts + 1 END,
		created_at = CASE WHEN k.expires_at < now() THEN now() ELSE k.created_at END,
		expires_at = CASE WHEN k.expires_at < now() THEN EXCLUDED.expires_at ELSE greatest(k.expires_at, EXCLUDED.lease_until) END,
		taken_over_at = CASE WHEN k.status = 'in_progress' THEN now() ELSE k.taken_over_at END,
		generation = CASE WHEN k.expires_at < now() THEN EXCLUDED.generation ELSE greatest(k.generation, EXCLUDED.generation) END,
		epoch = CASE WHEN k.expires_at < now() THEN 0
			WHEN k.status IN ('failed', 'failed_permanent') AND k.answered AND EXCLUDED.generation > k.generation THEN k.epoch + 1
			ELSE k.epoch END,
		answered = false
	WHERE NOT (k.status = 'in_progress' AND k.lease_until >= now())
		AND (k.expires_at < now()
			OR (k.status IN ('failed', 'in_progress') AND (EXCLUDED.generation > k.generation
				OR (NOT (EXCLUDED.generation > 0 AND EXCLUDED.generation < k.generation) AND k.fingerprint = EXCLUDED.fingerprint)))
			OR (k.status = 'failed_permanent' AND EXCLUDED.generation > k.generation))
	RETURNING k.lease_token, k.status, k.fingerprint, k.result, k.error, k.lease_until, k.taken_over_at IS NOT DISTINCT FROM now(), k.generation, k.epoch
)
SELECT lease_token, status, fingerprint, result, error, lease_until, NULL::float8, taken_over, generation, epoch
FROM up AS u(lease_token, status, fingerprint, result, error, lease_until, taken_over, generation, epoch)
UNION ALL
SELECT NULL, status, fingerprint, result, error, lease_until, extract(epoch FROM lease_until - now())::float8, false, generation, epoch FROM idempotency_keys
WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM up)`, c.key, c.fp, token, s.o.Lease, s.o.TTL, c.gen).
			Scan(&gotToken, &status, &storedFP, &result, &errText, &until, &left, &tookOver, &keyGen, &epoch)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // inserted and deleted (reaped) between the two halves: try again
		}
		if err != nil {
			return acquired{}, fmt.Errorf("acquiring idempotency key %s: %w", c.key, err)
		}
		if gotToken != nil && *gotToken == token {
			return acquired{token: token, held: keyGen, epoch: epoch, status: status, tookOver: tookOver}, nil
		}
		a := acquired{status: status, result: result}
		if errText != nil {
			a.errText = *errText
		}
		var remaining time.Duration
		if left != nil && *left > 0 {
			remaining = time.Duration(*left * float64(time.Second))
		}
		return decide(c, a, storedFP, keyGen, until, remaining)
	}
}

// decide is the answer of a key that the caller did not take: the one
// place that says which caller gets a stored outcome, a mismatch, a
// superseded error or a busy key.
func decide(c call, a acquired, storedFP []byte, keyGen int, until *time.Time, remaining time.Duration) (acquired, error) {
	newer := c.gen > keyGen
	older := c.gen > 0 && c.gen < keyGen
	same := string(storedFP) == string(c.fp)
	switch {
	case a.status == StatusCompleted && (same || newer || older):
		return a, nil // a success answers every generation
	case older:
		return acquired{}, &SupersededError{Key: c.key, Generation: c.gen, KeyGeneration: keyGen}
	case !same && !newer:
		return acquired{}, &MismatchError{Key: c.key}
	case a.status == StatusFailedPermanent:
		return a, nil
	}
	// in_progress under a live lease (a newer generation waits for it too:
	// the older holder may be making the effect right now).
	ip := &InProgressError{Key: c.key, Remaining: remaining}
	if until != nil {
		ip.LeaseUntil = *until
	}
	return acquired{}, ip
}
