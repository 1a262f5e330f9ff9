package ledger

import (
	"encoding/binary"
	"math/bits"
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
// those, and a new ID takes the window's slot that is free, too old or
// oldest. An ID answers for startedMaxAge after it was remembered; a
// lookup is one probe of memory, and a replay of more IDs than the table
// holds, which no lookup answers, costs one more write an ID.
type startedCache struct {
	mu sync.Mutex
	// changes counts the marks past generation 1 and the purges, begun
	// and ended: a claim remembers nothing it read while one was in
	// progress (since), whose row it may have moved or deleted after the
	// read.
	changes uint64
	entries int
	now     func() time.Time
	// base is the time the slots' seconds count from.
	base time.Time
	// epoch is the slots' epoch that answers: a purge moves it on, so
	// every slot filled before is free.
	epoch uint32
	slots []startedSlot
}

// startedSlot is one remembered ID: 72 bytes.
type startedSlot struct {
	sum, hash [32]byte
	// epoch is the cache's epoch when it was filled (0: never); at, its
	// whole seconds since base.
	epoch, at uint32
}

func newStartedCache(entries int, now func() time.Time) *startedCache {
	if entries <= 0 {
		return nil
	}
	return &startedCache{entries: entries, now: now, base: now(), epoch: 1}
}

// seconds is t's whole seconds since base (0 before it).
func (c *startedCache) seconds(t time.Time) uint32 {
	return uint32(max(t.Sub(c.base), 0) / time.Second)
}

// window is the slots sum may be put in.
func (c *startedCache) window(sum *[32]byte) []startedSlot {
	ways := min(startedWays, len(c.slots))
	// The sum's first 64 bits are uniform: scaled to the windows' starts.
	i, _ := bits.Mul64(binary.LittleEndian.Uint64(sum[:8]), uint64(len(c.slots)-ways+1))
	return c.slots[i : int(i)+ways]
}

// answers says whether s remembers sum with hash, now (seconds since
// base). Whole seconds are taken of both times, so a slot stops
// answering up to a second before startedMaxAge is over, never after.
func (c *startedCache) answers(s *startedSlot, sum, hash *[32]byte, now uint32) bool {
	return s.epoch == c.epoch && s.sum == *sum && now-s.at < uint32(startedMaxAge/time.Second) && s.hash == *hash
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
	if c.slots == nil {
		return uniq
	}
	now := c.seconds(c.now())
	left := uniq[:0:0]
next:
	for _, i := range uniq {
		in := &intents[i]
		w := c.window(&sums[i])
		for k := range w {
			if c.answers(&w[k], &sums[i], &in.PayloadHash, now) {
				got[i] = stored{found: true, state: StateStarted, hash: in.PayloadHash[:], generation: 1}
				continue next
			}
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
	if c.slots == nil {
		c.slots = make([]startedSlot, c.entries)
	}
	now := c.seconds(c.now())
	for _, i := range at {
		w := c.window(&sums[i])
		w[c.slotFor(w, &sums[i], now)] = startedSlot{sum: sums[i], hash: intents[i].PayloadHash, epoch: c.epoch, at: now}
	}
}

// slotFor is the slot of w that sum goes in: its own, else the first
// that answers nothing (free, of an earlier epoch, or too old), else the
// one remembered longest ago.
func (c *startedCache) slotFor(w []startedSlot, sum *[32]byte, now uint32) int {
	for k := range w {
		if w[k].epoch == c.epoch && w[k].sum == *sum {
			return k
		}
	}
	put := 0
	for k := range w {
		if w[k].epoch != c.epoch || now-w[k].at >= uint32(startedMaxAge/time.Second) {
			return k
		}
		if w[k].at < w[put].at {
			put = k
		}
	}
	return put
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
			c.changes++
			if c.slots == nil {
				continue
			}
			_, sum := keySumOf(started[i].WorkflowID)
			w := c.window(&sum)
			for k := range w {
				if w[k].sum == sum {
					w[k] = startedSlot{}
				}
			}
		}
	}
}

// forgetAll forgets every ID and counts the change; Purge calls it
// before its statements and after them. It moves the epoch on, so that
// a purge costs no pass over the table (but the one in 2^32 that wraps
// it around).
func (c *startedCache) forgetAll() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	if c.epoch == 0 {
		clear(c.slots)
		c.epoch = 1
	}
	c.changes++
}
