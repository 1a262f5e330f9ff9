-- The external key of an idempotency key: what its call sends to the
-- outside service (an Idempotency-Key header). Services that honour such a
-- header (Stripe; draft-ietf-httpapi-idempotency-key-header) bind a key to
-- its first request for good: a repeat gets the saved answer, a 500 as
-- well, and a repeat with another body is refused (422). So a newer
-- generation that takes over a failure the service answered must call
-- under a key the service has not bound to that failure.
--
-- epoch: how many answered failures newer generations have taken over so
-- far; the external key is the key itself at epoch 0, key:epoch after.
-- answered: the recorded failure is the service's answer (fn's error was
-- not marked unanswered and its call was not cut short). A failure of
-- unknown outcome (no answer, a timeout) keeps the external key, as does a
-- lease taken over from a crashed holder: the service may have made the
-- effect, and only the same key lets it drop the repeat.
--
-- Rows from before: epoch 0 (their key as sent so far). A permanent
-- failure was an answer (a refusal); other failures count as of unknown
-- outcome (their external key is kept once more, as before this column).
-- Adding a column with a constant default rewrites no rows; the UPDATE
-- touches the permanent failures only.

-- +goose Up
ALTER TABLE idempotency_keys
    ADD COLUMN IF NOT EXISTS epoch    integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS answered boolean NOT NULL DEFAULT false;
UPDATE idempotency_keys SET answered = true WHERE status = 'failed_permanent' AND NOT answered;

-- +goose Down
ALTER TABLE idempotency_keys
    DROP COLUMN IF EXISTS epoch,
    DROP COLUMN IF EXISTS answered;
