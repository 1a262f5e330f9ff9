package ledger

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
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

// startedWays is how many slots of the table an ID may be put in: the
// window of consecutive slots its SHA-256 picks.
const startedWays = 4

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
// share a SHA-256.
//
// The memory is one table of exactly entries slots, made at the first
// ID remembered and never grown; a slot holds no pointer, so the garbage
// collector never scans it. An ID's SHA-256 picks a window of startedWays
// consecutive slots (they share a few cache lines): a lookup compares
// those, and a new ID takes the window's slot that answers nothing (free,
// forgotten by a purge, or too old), else the one filled longest ago. An
// ID answers for less than startedMaxAge after it was remembered, by the
// clock's nanoseconds; a time the clock cannot tell (more than 292 years
// from the memory's start) answers nothing and remembers nothing. A
// lookup is one probe of memory, and a replay of more IDs than the table
// holds, which no lookup answers, costs one more write an ID.
type startedCache struct {
	mu sync.Mutex
	// changes counts the marks past generation 1 and the purges, begun
	// and ended, and busy those in progress: a claim remembers nothing it
	// read while one was in progress (since), whose row it may have moved
	// or deleted after the read.
	changes uint64
	busy    int
	// quiet is until when (nanoseconds since base) a claim begun then
	// remembers nothing: startedMaxAge after a mark or purge that
	// returned an error, whose statement may still land (a cancel that
	// reaches the server late, a commit waiting for a standby).
	quiet   int64
	entries int
	now     func() time.Time
	// base is the time the slots' times count from.
	base time.Time
	// filled numbers the slots as they are filled (from 1); a purge
	// forgets every slot filled up to forgot.
	filled, forgot uint64
	slots          []startedSlot
	// maybe is answer's scratch: whether a slot of the window of
	// uniq[j] may hold its ID.
	maybe []bool
}

// startedSlot is one remembered ID: 80 bytes.
type startedSlot struct {
	sum, hash [32]byte
	// at is when it was filled, in nanoseconds since base; seq, the
	// cache's filled then (0: never filled).
	at  int64
	seq uint64
}

func newStartedCache(entries int, now func() time.Time) *startedCache {
	if entries <= 0 {
		return nil
	}
	return &startedCache{entries: min(entries, maxStartedCache), now: now, base: now(), quiet: math.MinInt64}
}

// nanos is t in nanoseconds since base, and whether the clock can tell
// it (a time.Duration holds it, with a nanosecond to spare either side).
func (c *startedCache) nanos(t time.Time) (int64, bool) {
	d := t.Sub(c.base)
	return int64(d), d > math.MinInt64 && d < math.MaxInt64
}

// window is the slots sum may be put in.
func (c *startedCache) window(sum *[32]byte) []startedSlot {
	ways := min(startedWays, len(c.slots))
	// The sum's first 64 bits are uniform: scaled to the windows' starts.
	i, _ := bits.Mul64(binary.LittleEndian.Uint64(sum[:8]), uint64(len(c.slots)-ways+1))
	return c.slots[i : int(i)+ways]
}

// live says whether s answers at now (nanoseconds since base): filled
// since the last purge, at or before now, and less than startedMaxAge
// before it.
func (c *startedCache) live(s *startedSlot, now int64) bool {
	return s.seq > c.forgot && s.at <= now && uint64(now)-uint64(s.at) < uint64(startedMaxAge)
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
	now, ok := c.nanos(c.now())
	if c.slots == nil || !ok {
		return uniq
	}
	// Two passes. The first reads one word of each slot of every window,
	// loads that do not wait on each other, so that their cache misses
	// overlap (the table is out of the processor's caches between
	// batches), and keeps the IDs a slot may hold. The second compares
	// those in full, from the cache lines the first brought in.
	c.maybe = slices.Grow(c.maybe[:0], len(uniq))[:len(uniq)]
	for j, i := range uniq {
		word := binary.LittleEndian.Uint64(sums[i][8:16])
		w := c.window(&sums[i])
		m := false
		for k := range w {
			if binary.LittleEndian.Uint64(w[k].sum[8:16]) == word {
				m = true
			}
		}
		c.maybe[j] = m
	}
	left := uniq[:0:0]
next:
	for j, i := range uniq {
		if !c.maybe[j] {
			left = append(left, i)
			continue
		}
		in := &intents[i]
		w := c.window(&sums[i])
		for k := range w {
			if w[k].sum == sums[i] && w[k].hash == in.PayloadHash && c.live(&w[k], now) {
				got[i] = stored{found: true, state: StateStarted, hash: in.PayloadHash[:], generation: 1}
				continue next
			}
		}
		left = append(left, i)
	}
	return left
}

// startedSince is what a claim passes to remember: the changes counted,
// and the clock (nanoseconds since base, and whether it could tell),
// before its first statement.
type startedSince struct {
	changes uint64
	at      int64
	ok      bool
}

// since is taken before a claim's first statement.
func (c *startedCache) since() startedSince {
	if c == nil {
		return startedSince{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.nanos(c.now())
	return startedSince{changes: c.changes, at: at, ok: ok}
}

// remember puts the intents at, whose rows the ledger has just answered
// started with their payload hash at generation 1, as of the claim's
// beginning (since.at: the read came after it, so the ID answers less
// than startedMaxAge after the read, however long the claim took). It
// remembers nothing if a re-run's mark or a purge began or ended since
// the claim began, or is in progress, or if the claim began less than
// startedMaxAge after one that failed: its read may be older than the
// change, and the row moved or gone.
func (c *startedCache) remember(intents []decide.Intent, sums [][32]byte, at []int, since startedSince) {
	if c == nil || len(at) == 0 || !since.ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.changes != since.changes || c.busy > 0 || since.at < c.quiet {
		return
	}
	now, ok := c.nanos(c.now())
	if !ok {
		return
	}
	if c.slots == nil {
		c.slots = make([]startedSlot, c.entries)
	}
	// The earlier of the claim's beginning and now: a clock stepped back
	// since must not stamp the read as newer than it can be.
	stamp := min(since.at, now)
	for _, i := range at {
		w := c.window(&sums[i])
		c.filled++
		w[c.slotFor(w, &sums[i], now)] = startedSlot{sum: sums[i], hash: intents[i].PayloadHash, at: stamp, seq: c.filled}
	}
}

// slotFor is the slot of w that sum goes in: its own, else the first
// that answers nothing (free, forgotten, or too old), else the one
// filled longest ago.
func (c *startedCache) slotFor(w []startedSlot, sum *[32]byte, now int64) int {
	for k := range w {
		if w[k].seq > c.forgot && w[k].sum == *sum {
			return k
		}
	}
	put := 0
	for k := range w {
		if !c.live(&w[k], now) {
			return k
		}
		if w[k].seq < w[put].seq {
			put = k
		}
	}
	return put
}

// forgetReruns forgets the workflow IDs of marks past generation 1 and,
// if there is one, counts the mark as begun; MarkStarted calls it before
// its statement and defers the func it returns, which forgets those IDs
// again and counts the mark as ended (failed: it returned an error, and
// its statement may land later).
func (c *startedCache) forgetReruns(started []processor.Started) (ended func(failed bool)) {
	if c == nil {
		return func(bool) {}
	}
	var sums [][32]byte
	for i := range started {
		if started[i].Generation > 1 {
			_, sum := keySumOf(started[i].WorkflowID)
			sums = append(sums, sum)
		}
	}
	if len(sums) == 0 {
		return func(bool) {}
	}
	c.rerunsChange(sums, 1, false)
	return func(failed bool) { c.rerunsChange(sums, -1, failed) }
}

// rerunsChange forgets the IDs of sums, counts a change and moves busy
// by step (and quiet on, if the change failed).
func (c *startedCache) rerunsChange(sums [][32]byte, step int, failed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.changes++
	c.busy += step
	if failed {
		c.quietOn()
	}
	if c.slots == nil {
		return
	}
	for _, sum := range sums {
		w := c.window(&sum)
		for k := range w {
			if w[k].sum == sum {
				w[k] = startedSlot{}
			}
		}
	}
}

// forgetAll forgets every ID and counts a purge as begun; Purge calls it
// before its statements and defers the func it returns, which forgets
// every ID again and counts the purge as ended (failed: as for a mark).
// It costs no pass over the table: every slot filled so far is forgotten.
func (c *startedCache) forgetAll() (ended func(failed bool)) {
	if c == nil {
		return func(bool) {}
	}
	c.purgeChange(1, false)
	return func(failed bool) { c.purgeChange(-1, failed) }
}

func (c *startedCache) purgeChange(step int, failed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgot = c.filled
	c.changes++
	c.busy += step
	if failed {
		c.quietOn()
	}
}

// quietOn makes the claims begun from now until startedMaxAge on
// remember nothing (all of them, if the clock cannot tell now). Called
// with mu held.
func (c *startedCache) quietOn() {
	now, ok := c.nanos(c.now())
	if !ok || now > math.MaxInt64-int64(startedMaxAge) {
		c.quiet = math.MaxInt64
		return
	}
	c.quiet = max(c.quiet, now+int64(startedMaxAge))
}
