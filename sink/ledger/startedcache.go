package ledger

import (
	"sync"
	"time"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
)

// startedMaxAge bounds how long a remembered started row answers its
// copies: a row that another process purged (postgres.retention, at
// least 1h) or that was changed by hand since is read again within this
// time; this handle's own purge forgets every row at once.
const startedMaxAge = time.Minute

// startedCache remembers the workflow IDs whose rows a claim of this
// process found started with a payload hash, at generation 1, so that a
// later copy of the same ID with the same hash is answered a duplicate
// without a read (postgres.started_cache; a replay's copies of earlier
// events, a producer's retries after the start). It answers what the
// ledger would: a started row never goes back to pending (the only
// change to it is a re-run's generation: this process's marks of a re-run
// forget its ID, and a claim that overlapped one remembers nothing; another process's re-run, answered generation 1 here
// for at most startedMaxAge, is read from Temporal by the re-run check
// anyway, which starts the generation after the last run's), and a copy
// with another payload is never answered here, so its conflict is
// recorded by the ledger as before.
//
// An ID is remembered by its whole SHA-256 (keySumOf), not by its ledger
// key, of which two IDs may share 80 or 128 bits: no two IDs are known to
// share a SHA-256. Keys and values hold no pointer, so the garbage
// collector never scans the maps.
//
// It holds at most entries IDs in two maps: new IDs go into young; when
// young holds half of them, or is half of startedMaxAge old, it becomes
// old and the old one is dropped. An ID answers only while the map it was
// put in began less than startedMaxAge ago.
type startedCache struct {
	mu   sync.Mutex
	half int
	// changes counts the marks past generation 1 and the purges, begun
	// and ended: a claim remembers nothing it read while one was in
	// progress (since), whose row it may have moved or deleted after the
	// read.
	changes        uint64
	now            func() time.Time
	young, old     map[[32]byte][32]byte
	youngAt, oldAt time.Time
}

func newStartedCache(entries int, now func() time.Time) *startedCache {
	if entries <= 0 {
		return nil
	}
	return &startedCache{half: max(entries/2, 1), now: now, youngAt: now()}
}

// age drops what is too old and turns young into old when it is full or
// half of startedMaxAge old. Called with mu held.
func (c *startedCache) age() {
	t := c.now()
	if c.young != nil && (len(c.young) >= c.half || t.Sub(c.youngAt) >= startedMaxAge/2) {
		c.old, c.oldAt, c.young = c.young, c.youngAt, nil
	}
	if c.young == nil {
		c.youngAt = t
	}
	if c.old != nil && t.Sub(c.oldAt) >= startedMaxAge {
		c.old = nil
	}
}

// answer records in got, as started rows of generation 1, the intents of
// uniq whose IDs (sums: their SHA-256, by intent) it remembers started
// with their payload hash, and returns the others, in uniq's order.
func (c *startedCache) answer(intents []decide.Intent, sums [][32]byte, uniq []int, got []stored) []int {
	if c == nil {
		return uniq
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.age()
	if len(c.young)+len(c.old) == 0 {
		return uniq
	}
	left := uniq[:0:0]
	for _, i := range uniq {
		in := &intents[i]
		h, ok := c.young[sums[i]]
		if !ok {
			h, ok = c.old[sums[i]]
		}
		if ok && h == in.PayloadHash {
			got[i] = stored{found: true, state: StateStarted, hash: in.PayloadHash[:], generation: 1}
			continue
		}
		left = append(left, i)
	}
	return left
}

// since is what a claim passes to remember: taken before its first
// statement.
func (c *startedCache) since() uint64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changes
}

// remember puts the intents at, whose rows the ledger has just answered
// started with their payload hash at generation 1, unless a re-run's
// mark or a purge began or ended since the claim began (since): its read
// may be older than it, and the row moved or gone.
func (c *startedCache) remember(intents []decide.Intent, sums [][32]byte, at []int, since uint64) {
	if c == nil || len(at) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.changes != since {
		return
	}
	c.age()
	for _, i := range at {
		if c.young == nil {
			// As large as the last one grew: a replay fills each.
			c.young = make(map[[32]byte][32]byte, max(len(c.old), 64))
		}
		c.young[sums[i]] = intents[i].PayloadHash
		if len(c.young) >= c.half {
			c.age()
		}
	}
}

// forgetReruns forgets the workflow IDs of marks past generation 1, and
// counts the mark in changes; MarkStarted calls it before its statement
// and after it.
func (c *startedCache) forgetReruns(started []processor.Started) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range started {
		if started[i].Generation > 1 {
			_, sum := keySumOf(started[i].WorkflowID)
			delete(c.young, sum)
			delete(c.old, sum)
			c.changes++
		}
	}
}

// forgetAll forgets every ID and counts the change; Purge calls it
// before its statements and after them.
func (c *startedCache) forgetAll() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.young, c.old = nil, nil
	c.changes++
}
