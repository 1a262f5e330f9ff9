package ledger

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger/pooler"
)

var (
	_ processor.Ledger        = (*Postgres)(nil)
	_ processor.DeadLetterLog = (*Postgres)(nil)
)

// keyOf is the ledger's key of a workflow ID (schemas.LedgerKey; a test
// may make it collide).
var keyOf = schemas.LedgerKey

// keySumOf is keyOf and the ID's SHA-256 (startedCache's key), of one
// hash.
var keySumOf = schemas.LedgerKeySum

// keysOf is keyOf of each ID, in order.
func keysOf(ids []string) [][16]byte {
	out := make([][16]byte, len(ids))
	for i, id := range ids {
		out[i] = keyOf(id)
	}
	return out
}

// Postgres is the ledger.
type Postgres struct {
	pool *pgxpool.Pool
	// pooler is postgres.pooler: errors that show another name it
	// (pooler.Explain).
	pooler pooler.Mode
	// replaying is set while most of the last claimed batch's workflow IDs
	// were already started: Claim then reads them first, and otherwise goes
	// straight to the upsert, which answers started rows too.
	replaying atomic.Bool
	// started remembers the rows claims found started
	// (postgres.started_cache); nil remembers none.
	started *startedCache
	// rememberedHits counts the IDs the memory answered in claims that
	// returned their verdicts (StartedCacheHits); on the handle, so that
	// RememberStarted keeps it.
	rememberedHits atomic.Uint64
	// encodeBuffers keeps the buffers the read of started rows encoded
	// its parameters in (arrays.go), for the next read.
	encodeBuffers sync.Pool
}

// Open connects (lazily: the pool dials on first use).
func Open(ctx context.Context, cfg Config) (*Postgres, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pc, err := cfg.PoolConfig()
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("creating pool: %w", err)
	}
	return &Postgres{pool: pool, pooler: cfg.Pooler, started: newStartedCache(cfg.StartedCache, time.Now)}, nil
}

// NewFromPool wraps a pool the caller configured (a query tracer, say:
// the benchmark counts round trips with one), with no pooler in front of
// it. The caller closes it.
// It remembers no started row unless RememberStarted says so.
func NewFromPool(pool *pgxpool.Pool) *Postgres { return &Postgres{pool: pool} }

// RememberStarted makes p remember up to entries workflow IDs that its
// claims found started (postgres.started_cache; 0: none; more than
// 10,000,000, the most Config takes, is taken as that, 800 MB) and
// returns p. Call it before any other method of p, never while one runs:
// a mark or purge in flight counts its change on the memory it began on.
func (p *Postgres) RememberStarted(entries int) *Postgres {
	p.started = newStartedCache(entries, time.Now)
	return p
}

// StartedCacheHits is how many workflow IDs p's claims answered from its
// memory of started rows, with no statement (an ID once a claim; a claim
// that returned an error counts none). It never goes down.
func (p *Postgres) StartedCacheHits() uint64 { return p.rememberedHits.Load() }

// Close releases the pool.
func (p *Postgres) Close() { p.pool.Close() }

// Pool exposes the pool for inspection queries (tests, the dev summary).
func (p *Postgres) Pool() *pgxpool.Pool { return p.pool }

// pingTimeout bounds readiness probes.
const pingTimeout = 2 * time.Second

// Ready reports whether PostgreSQL answers within a short timeout.
func (p *Postgres) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	return p.pool.Ping(ctx)
}
