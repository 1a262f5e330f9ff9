package ledger

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
)

func TestTheStartedCacheNeverHoldsMoreThanItsEntries(t *testing.T) {
	for _, entries := range []int{1, 2, 5, 64} {
		now := time.Unix(1e9, 0)
		c := newStartedCache(entries, func() time.Time { return now })
		ins, sums := make([]decide.Intent, 300), make([][32]byte, 300)
		for i := range ins {
			ins[i] = decide.Intent{WorkflowID: fmt.Sprintf("activity-a:%d", i)}
			_, sums[i] = keySumOf(ins[i].WorkflowID)
			c.remember(ins, sums, []int{i}, c.since())
			if n := c.held(); n > entries || len(c.slots) != entries {
				t.Fatalf("entries %d: %d held in %d slots after %d IDs", entries, n, len(c.slots), i+1)
			}
			got := make([]stored, len(ins))
			if left := c.answer(ins, sums, []int{i}, got); len(left) != 0 {
				t.Fatalf("entries %d: the ID just remembered (%d) is not answered", entries, i)
			}
			now = now.Add(time.Millisecond)
		}
	}
}

// held is how many IDs c answers for.
func (c *startedCache) held() int {
	n := 0
	for k := range c.slots {
		if c.slots[k].seq > c.forgot {
			n++
		}
	}
	return n
}

// The runbook, the example config and Config.StartedCache say a
// remembered workflow ID costs 80 bytes, made at the first ID remembered,
// and maxStartedCache's 10,000,000 800 MB: a user sizes a replica's
// memory by them (adversary 36b: they once said 80 and 800 MB). Measured
// on the live heap when the cache is full, right after a collection,
// with 5% slack over the figure.
func TestAFullStartedCacheHolds80BytesAnID(t *testing.T) {
	const perID = 80 * 1.05
	for _, entries := range []int{100_000, 1_000_000} {
		now := time.Unix(1e9, 0)
		runtime.GC()
		var before, full runtime.MemStats
		runtime.ReadMemStats(&before)
		c := newStartedCache(entries, func() time.Time { return now })
		ins, sums := make([]decide.Intent, 1), make([][32]byte, 1)
		for k := 0; k < 2*entries; k++ {
			ins[0] = decide.Intent{WorkflowID: fmt.Sprintf("activity-a:%d", k)}
			_, sums[0] = keySumOf(ins[0].WorkflowID)
			c.remember(ins, sums, []int{0}, c.since())
		}
		runtime.GC()
		runtime.ReadMemStats(&full)
		held := c.held()
		live := float64(full.HeapAlloc) - float64(before.HeapAlloc)
		if held < entries*9/10 {
			t.Errorf("started_cache %d: %d IDs held after %d remembered", entries, held, 2*entries)
		}
		if live/float64(entries) > perID {
			t.Errorf("started_cache %d: %.0f MB of live heap, %.0f bytes an entry; the docs say 80",
				entries, live/1e6, live/float64(entries))
		}
		runtime.KeepAlive(c)
	}
}

// benchStartedCache runs a claim's use of the memory of started rows over
// ids IDs in batches of 1,000, round after round: each batch is answered,
// and what it did not answer is remembered, as a claim whose read found
// every row started does. ns/op is per ID. Between batches, untimed, it
// writes 64 MiB, as a router's fetches, decoding and reads do between two
// claims: the memory's table is then out of the processor's caches, as it
// is in a router.
func benchStartedCache(b *testing.B, entries, ids int) {
	other := make([]byte, 64<<20)
	now := time.Unix(1e9, 0)
	c := newStartedCache(entries, func() time.Time { return now })
	const batch = 1000
	ins, sums := make([]decide.Intent, ids), make([][32]byte, ids)
	for i := range ins {
		ins[i] = decide.Intent{WorkflowID: fmt.Sprintf("activity-a:%d", i)}
		_, sums[i] = keySumOf(ins[i].WorkflowID)
	}
	got := make([]stored, ids)
	uniq := make([]int, batch)
	hits := 0
	b.ResetTimer()
	for n := 0; n < b.N; n += batch {
		b.StopTimer()
		for k := 0; k < len(other); k += 64 {
			other[k]++
		}
		b.StartTimer()
		from := n % ids
		for j := range uniq {
			uniq[j] = (from + j) % ids
		}
		since := c.since()
		left := c.answer(ins, sums, uniq, got)
		hits += batch - len(left)
		c.remember(ins, sums, left, since)
	}
	b.ReportMetric(float64(hits)/float64(b.N), "hits/ID")
}

// A replay of more IDs than the memory holds: every ID misses and is
// remembered.
func BenchmarkStartedCacheReplayPastItsSize(b *testing.B) { benchStartedCache(b, 100_000, 200_000) }

// A producer's retries of IDs the memory holds: nearly every ID after the
// first round is answered (hits/ID; a window of startedWays slots can be
// full while the table has room).
func BenchmarkStartedCacheRetriesWithinItsSize(b *testing.B) { benchStartedCache(b, 100_000, 50_000) }

// A random run of remembers (some with a since older than a mark or purge
// in between), look-ups, re-runs' forgets, purges and clock moves (on by
// up to 70 s, back by up to 10 s, also before the memory's start), on tables of 1 to 7 and 64 slots,
// with IDs whose SHA-256s share their first 64 bits (one window) or not:
// every answer is one a model of the ledger's rows gives. The model
// remembers, by SHA-256, the payload hash and time of the last
// remember that counted, until its ID's re-run or a purge; an answer of
// the memory must be of such an ID, with that hash, less than
// startedMaxAge after it. At most entries are held, and an ID just
// remembered is answered.
func TestTheStartedCacheAnswersOnlyWhatAModelOfTheLedgerRemembers(t *testing.T) {
	type fact struct {
		hash [32]byte
		at   time.Time
	}
	for _, entries := range []int{1, 2, 3, 4, 5, 7, 64} {
		for seed := range int64(20) {
			rng := rand.New(rand.NewSource(seed*100 + int64(entries)))
			base := time.Unix(1e9, 0)
			now := base
			c := newStartedCache(entries, func() time.Time { return now })
			// 24 IDs: the first 8 share their first 64 bits, the next 8 share
			// another 64 bits, the last 8 differ.
			ids := make([]string, 24)
			sums := make([][32]byte, 24)
			for i := range ids {
				ids[i] = fmt.Sprintf("activity-a:%d", i)
				_, sums[i] = keySumOf(ids[i])
				if i < 16 {
					binary.LittleEndian.PutUint64(sums[i][:8], uint64(i/8)<<63|12345)
				}
			}
			hashes := [][32]byte{{1}, {2}}
			model := map[[32]byte]fact{}
			sumOf := func(id string) [32]byte {
				for i := range ids {
					if ids[i] == id {
						return sums[i]
					}
				}
				t.Fatalf("no ID %s", id)
				return [32]byte{}
			}
			restore := keySumOf
			keySumOf = func(id string) ([16]byte, [32]byte) { return [16]byte{}, sumOf(id) }
			for step := range 3000 {
				switch op := rng.Intn(100); {
				case op < 35: // a claim: look-up, then remember what the ledger found
					k := rng.Intn(len(ids))
					in := []decide.Intent{{WorkflowID: ids[k], PayloadHash: hashes[rng.Intn(2)]}}
					s := [][32]byte{sums[k]}
					since := c.since()
					got := make([]stored, 1)
					if left := c.answer(in, s, []int{0}, got); len(left) == 0 {
						f, ok := model[sums[k]]
						switch {
						case !ok:
							t.Fatalf("entries %d seed %d step %d: ID %d answered, never remembered or forgotten since", entries, seed, step, k)
						case f.hash != in[0].PayloadHash:
							t.Fatalf("entries %d seed %d step %d: ID %d answered with a hash it was not remembered with", entries, seed, step, k)
						case now.Sub(f.at) >= startedMaxAge:
							t.Fatalf("entries %d seed %d step %d: ID %d answered %v after it was remembered", entries, seed, step, k, now.Sub(f.at))
						}
						continue
					}
					stale := rng.Intn(4) == 0
					if stale { // a mark or purge begins while the claim reads
						if rng.Intn(2) == 0 {
							j := rng.Intn(len(ids))
							c.forgetReruns([]processor.Started{{WorkflowID: ids[j], Generation: 2}})(false)
							delete(model, sums[j])
						} else {
							c.forgetAll()(false)
							clear(model)
						}
					}
					c.remember(in, s, []int{0}, since)
					if !stale {
						model[sums[k]] = fact{in[0].PayloadHash, now}
						if left := c.answer(in, s, []int{0}, got); len(left) != 0 {
							t.Fatalf("entries %d seed %d step %d: ID %d just remembered is not answered", entries, seed, step, k)
						}
					}
				case op < 50:
					j := rng.Intn(len(ids))
					c.forgetReruns([]processor.Started{{WorkflowID: ids[j], Generation: 2 + rng.Intn(3)}})(false)
					delete(model, sums[j])
				case op < 55:
					c.forgetAll()(false)
					clear(model)
				case op < 90:
					now = now.Add(time.Duration(rng.Int63n(int64(2 * time.Second))))
				case op < 95:
					now = now.Add(time.Duration(rng.Int63n(int64(70 * time.Second))))
				default:
					now = now.Add(-time.Duration(rng.Int63n(int64(10 * time.Second))))
				}
				if n := c.held(); n > entries {
					t.Fatalf("entries %d: %d held", entries, n)
				}
			}
			keySumOf = restore
		}
	}
}

// An ID answers for less than startedMaxAge, whatever fractions of a
// second the memory's start, the remember and the look-up fall on, and
// still answers 59 s on.
func TestARememberedIDNeverAnswersAtOrAfterItsMinuteWhateverTheFractionsOfASecond(t *testing.T) {
	fracs := []time.Duration{0, 1, time.Second / 2, time.Second - 1}
	ages := []time.Duration{0, 58*time.Second + time.Second - 1, 59 * time.Second, startedMaxAge - 1, startedMaxAge, startedMaxAge + 1, 61 * time.Second, time.Hour}
	for _, fb := range fracs {
		for _, fr := range append(fracs, 17*time.Second+time.Second/3) {
			for _, age := range ages {
				base := time.Unix(1e9, 0).Add(fb)
				now := base
				c := newStartedCache(8, func() time.Time { return now })
				in := []decide.Intent{{WorkflowID: "activity-a:x", PayloadHash: [32]byte{9}}}
				sums := make([][32]byte, 1)
				_, sums[0] = keySumOf(in[0].WorkflowID)
				now = base.Add(3*time.Second + fr)
				c.remember(in, sums, []int{0}, c.since())
				now = now.Add(age)
				answered := len(c.answer(in, sums, []int{0}, make([]stored, 1))) == 0
				switch {
				case age >= startedMaxAge && answered:
					t.Errorf("start +%v, remembered +%v: answered %v after", fb, fr, age)
				case age <= 59*time.Second && !answered:
					t.Errorf("start +%v, remembered +%v: not answered %v after", fb, fr, age)
				}
			}
		}
	}
}

// A purge forgets every ID remembered before it, and none remembered
// after it, also on a clock that has not moved since (a purge costs no
// pass over the table: it forgets by the order slots were filled in).
func TestAPurgeForgetsEveryIDRememberedBeforeItAndNoneAfter(t *testing.T) {
	now := time.Unix(1e9, 0)
	c := newStartedCache(16, func() time.Time { return now })
	in := func(id string) ([]decide.Intent, [][32]byte) {
		ins := []decide.Intent{{WorkflowID: id, PayloadHash: [32]byte{1}}}
		sums := make([][32]byte, 1)
		_, sums[0] = keySumOf(id)
		return ins, sums
	}
	answered := func(ins []decide.Intent, sums [][32]byte) bool {
		return len(c.answer(ins, sums, []int{0}, make([]stored, 1))) == 0
	}
	before, beforeSums := in("activity-a:before")
	c.remember(before, beforeSums, []int{0}, c.since())
	c.forgetAll()(false)
	if answered(before, beforeSums) || c.held() != 0 {
		t.Fatalf("after the purge: the ID remembered before it answers, or %d held", c.held())
	}
	after, afterSums := in("activity-a:after")
	c.remember(after, afterSums, []int{0}, c.since())
	c.remember(before, beforeSums, []int{0}, c.since())
	if !answered(after, afterSums) || !answered(before, beforeSums) || c.held() != 2 {
		t.Errorf("IDs remembered after the purge, the clock still: answered %v and %v, %d held",
			answered(after, afterSums), answered(before, beforeSums), c.held())
	}
}

// At the edges of what the memory's clock can tell (a time.Duration from
// its start, less a nanosecond either side) an ID answers for less than
// startedMaxAge and no longer; at a time it cannot tell (Sub saturates) it
// answers nothing and remembers nothing, and a slot filled at one edge
// never answers at the other.
func TestTheStartedCacheAnswersLessThanAMinuteAtTheEdgesOfItsClockAndNothingPastThem(t *testing.T) {
	base := time.Unix(1e9, 0)
	const maxD = time.Duration(math.MaxInt64)
	in := []decide.Intent{{WorkflowID: "activity-a:edge", PayloadHash: [32]byte{3}}}
	sums := make([][32]byte, 1)
	_, sums[0] = keySumOf(in[0].WorkflowID)
	for _, c := range []struct {
		name string
		at   time.Time // remembered at
		then []struct {
			now  time.Time
			want bool
		}
	}{
		{"last tellable", base.Add(maxD - 1), []struct {
			now  time.Time
			want bool
		}{{base.Add(maxD - 1), true}, {base.Add(maxD), false}, {base.Add(maxD).Add(time.Hour), false},
			{base.Add(-maxD), false}, {base, false}, {base.Add(maxD - 1), true}}},
		{"first tellable", base.Add(-maxD), []struct {
			now  time.Time
			want bool
		}{{base.Add(-maxD), true}, {base.Add(-maxD).Add(startedMaxAge - 1), true}, {base.Add(-maxD).Add(startedMaxAge), false},
			{base.Add(-maxD).Add(-1), false}, {base.Add(maxD - 1), false}, {base.Add(-maxD).Add(time.Second), true}}},
	} {
		now := base // the memory's start
		cache := newStartedCache(4, func() time.Time { return now })
		now = c.at
		cache.remember(in, sums, []int{0}, cache.since())
		if cache.held() != 1 {
			t.Fatalf("%s: %d held after a remember at a time the clock tells", c.name, cache.held())
		}
		for k, th := range c.then {
			now = th.now
			got := len(cache.answer(in, sums, []int{0}, make([]stored, 1))) == 0
			if got != th.want {
				t.Errorf("%s: look-up %d at %v from the remember: answered %v, want %v", c.name, k, th.now.Sub(c.at), got, th.want)
			}
		}
		// A time the clock cannot tell remembers nothing.
		for _, far := range []time.Time{base.Add(maxD).Add(time.Hour), base.Add(-maxD).Add(-time.Hour)} {
			now = base
			fresh := newStartedCache(4, func() time.Time { return now })
			now = far
			fresh.remember(in, sums, []int{0}, fresh.since())
			now = base
			if fresh.held() != 0 || len(fresh.answer(in, sums, []int{0}, make([]stored, 1))) == 0 {
				t.Errorf("%s: remembered at %v (the clock cannot tell): %d held, or answered at the start", c.name, far, fresh.held())
			}
		}
	}
}

// Claims (look-up, then remember with the since taken before it), re-runs'
// forgets and purges from several goroutines on one memory (run with
// -race), with IDs that share a window, on tables of 1 to 7 slots: the
// memory never holds more than its entries, never two slots of one ID
// that a purge has not forgotten, never a slot numbered past what it
// filled; after the last purge, with nothing remembered since, it answers
// nothing.
func TestTheStartedCacheKeepsItsShapeUnderConcurrentClaimsMarksAndPurges(t *testing.T) {
	for _, entries := range []int{1, 2, 3, 4, 5, 7} {
		var clockMu sync.Mutex
		now := time.Unix(1e9, 0)
		c := newStartedCache(entries, func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now })
		ids := make([]string, 12)
		sums := make([][32]byte, len(ids))
		for i := range ids {
			ids[i] = fmt.Sprintf("activity-a:%d", i)
			_, sums[i] = keySumOf(ids[i])
			if i < 6 {
				binary.LittleEndian.PutUint64(sums[i][:8], 99)
			}
		}
		restore := keySumOf
		keySumOf = func(id string) ([16]byte, [32]byte) {
			for i := range ids {
				if ids[i] == id {
					return [16]byte{}, sums[i]
				}
			}
			return restore(id)
		}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewSource(int64(g*10 + entries)))
				for range 2000 {
					switch op := rng.Intn(10); {
					case op < 6:
						k := rng.Intn(len(ids))
						in := []decide.Intent{{WorkflowID: ids[k], PayloadHash: [32]byte{byte(rng.Intn(2))}}}
						s := [][32]byte{sums[k]}
						since := c.since()
						if left := c.answer(in, s, []int{0}, make([]stored, 1)); len(left) == 1 {
							c.remember(in, s, []int{0}, since)
						}
					case op < 8:
						c.forgetReruns([]processor.Started{{WorkflowID: ids[rng.Intn(len(ids))], Generation: 2}})(false)
					case op < 9:
						c.forgetAll()(false)
					default:
						clockMu.Lock()
						now = now.Add(time.Duration(rng.Int63n(int64(3*time.Second))) - time.Second)
						clockMu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		keySumOf = restore
		if n := c.held(); n > entries {
			t.Errorf("entries %d: %d held", entries, n)
		}
		seen := map[[32]byte]bool{}
		for k := range c.slots {
			s := &c.slots[k]
			if s.seq > c.filled {
				t.Errorf("entries %d: slot %d numbered %d, past the %d filled", entries, k, s.seq, c.filled)
			}
			if s.seq > c.forgot {
				if seen[s.sum] {
					t.Errorf("entries %d: two slots of one ID not forgotten", entries)
				}
				seen[s.sum] = true
			}
		}
		c.forgetAll()(false)
		for k := range ids {
			in := []decide.Intent{{WorkflowID: ids[k], PayloadHash: [32]byte{0}}, {WorkflowID: ids[k], PayloadHash: [32]byte{1}}}
			s := [][32]byte{sums[k], sums[k]}
			if left := c.answer(in, s, []int{0, 1}, make([]stored, 2)); len(left) != 2 {
				t.Errorf("entries %d: ID %d answered after the last purge", entries, k)
			}
		}
	}
}

// Every interleaving of one claim (since, then remember) with two changes
// (a re-run's mark of the claim's ID or of another, or a purge; each
// begun, then ended) on one memory: the claim's ID is answered right after
// its remember exactly when neither change was in progress at any moment
// between its since and its remember (each ended before the since, or
// begun after the remember). Adversary 40c: held.
func TestAClaimIsRememberedExactlyWhenNoChangeOverlapsItInAnyInterleaving(t *testing.T) {
	now := time.Unix(1e9, 0)
	x := decide.Intent{WorkflowID: "activity-x:1", PayloadHash: [32]byte{1}}
	ins := []decide.Intent{x}
	_, sx := keySumOf(x.WorkflowID)
	sums := [][32]byte{sx}
	kinds := []string{"mark of the ID", "mark of another", "purge"}
	// events: 0 since, 1 remember, 2 begin 1, 3 end 1, 4 begin 2, 5 end 2.
	var orders [][]int
	var perm func(prefix []int, used [6]bool)
	perm = func(prefix []int, used [6]bool) {
		if len(prefix) == 6 {
			orders = append(orders, append([]int(nil), prefix...))
			return
		}
		for e := range 6 {
			if used[e] || (e%2 == 1 && !used[e-1]) {
				continue
			}
			used[e] = true
			perm(append(prefix, e), used)
			used[e] = false
		}
	}
	perm(nil, [6]bool{})
	cases := 0
	for _, k1 := range kinds {
		for _, k2 := range kinds {
			for _, order := range orders {
				c := newStartedCache(16, func() time.Time { return now })
				// a remembered ID first, so that the table is made
				other := decide.Intent{WorkflowID: "activity-y:1", PayloadHash: [32]byte{2}}
				_, sy := keySumOf(other.WorkflowID)
				c.remember([]decide.Intent{other}, [][32]byte{sy}, []int{0}, c.since())
				begin := func(kind string) func(bool) {
					switch kind {
					case "mark of the ID":
						return c.forgetReruns([]processor.Started{{WorkflowID: x.WorkflowID, Generation: 2}})
					case "mark of another":
						return c.forgetReruns([]processor.Started{{WorkflowID: "activity-z:1", Generation: 2}})
					}
					return c.forgetAll()
				}
				pos := make([]int, 6)
				for p, e := range order {
					pos[e] = p
				}
				overlaps := func(b, e int) bool { return pos[e] >= pos[0] && pos[b] <= pos[1] }
				wantRemembered := !overlaps(2, 3) && !overlaps(4, 5)
				var since startedSince
				var end1, end2 func(bool)
				for _, e := range order {
					switch e {
					case 0:
						since = c.since()
					case 1:
						c.remember(ins, sums, []int{0}, since)
						got := make([]stored, 1)
						remembered := len(c.answer(ins, sums, []int{0}, got)) == 0
						if remembered != wantRemembered {
							t.Fatalf("%s then %s, events %v (0 since, 1 remember, 2/3 the first change, 4/5 the second): remembered %v, want %v", k1, k2, order, remembered, wantRemembered)
						}
					case 2:
						end1 = begin(k1)
					case 3:
						end1(false)
					case 4:
						end2 = begin(k2)
					case 5:
						end2(false)
					}
				}
				if c.busy != 0 {
					t.Fatalf("%s then %s, events %v: busy %d once every change ended", k1, k2, order, c.busy)
				}
				cases++
			}
		}
	}
	t.Logf("%d interleavings", cases)
}

// A claim's read comes after its since and before its remember. When the
// clock steps back between the two (a wall clock corrected by an hour),
// the ID remembered must still answer for less than startedMaxAge after
// the remember, by the clock as it runs on from there: never an hour
// later, when the clock comes back to the since, for the row another
// process may have purged or re-run meanwhile (answered from a read an
// hour old). Adversary 40d.
func TestAnIDRememberedAcrossAClockStepBackNeverAnswersAMinuteOrMoreAfterItsRemember(t *testing.T) {
	for _, back := range []time.Duration{time.Second, 2 * startedMaxAge, time.Hour} {
		start := time.Unix(1e9, 0)
		now := start
		c := newStartedCache(16, func() time.Time { return now })
		in := []decide.Intent{{WorkflowID: "activity-a:stepped", PayloadHash: [32]byte{7}}}
		sums := make([][32]byte, 1)
		_, sums[0] = keySumOf(in[0].WorkflowID)
		now = start.Add(10 * time.Second)
		since := c.since()
		now = now.Add(-back) // the clock steps back while the claim reads
		c.remember(in, sums, []int{0}, since)
		remembered := now
		var late []time.Duration // when it answered a minute or more after its remember
		for d := time.Duration(0); d <= back+2*startedMaxAge; d += time.Second {
			now = remembered.Add(d)
			answered := len(c.answer(in, sums, []int{0}, make([]stored, 1))) == 0
			if answered && d >= startedMaxAge {
				late = append(late, d)
			}
		}
		if len(late) > 0 {
			t.Errorf("clock stepped back %v between the since and the remember: the ID answers from %v to %v after its remember (its read is at least that old)", back, late[0], late[len(late)-1])
		}
	}
}

// After a re-run's mark or a purge that returned an error (its statement
// may still land), a claim begun less than startedMaxAge after it, by the
// memory's clock, remembers nothing, whatever the fraction of a second,
// also when the clock steps back after the failure or when another
// failure follows; one begun a minute after the last failure remembers
// again; a failure at a time the clock cannot tell quiets the memory for
// good. Adversary 40d: held.
func TestAClaimBegunWithinAMinuteAfterAFailedMarkOrPurgeRemembersNothing(t *testing.T) {
	in := []decide.Intent{{WorkflowID: "activity-a:quiet", PayloadHash: [32]byte{5}}}
	sums := make([][32]byte, 1)
	_, sums[0] = keySumOf(in[0].WorkflowID)
	fail := map[string]func(c *startedCache){
		"mark": func(c *startedCache) {
			c.forgetReruns([]processor.Started{{WorkflowID: in[0].WorkflowID, Generation: 2}})(true)
		},
		"other": func(c *startedCache) {
			c.forgetReruns([]processor.Started{{WorkflowID: "activity-b:other", Generation: 3}})(true)
		},
		"purge": func(c *startedCache) { c.forgetAll()(true) },
	}
	for name, f := range fail {
		for _, frac := range []time.Duration{0, 1, time.Second / 2, time.Second - 1} {
			for _, after := range []time.Duration{0, 1, time.Second, startedMaxAge - time.Second, startedMaxAge - 1, startedMaxAge, startedMaxAge + 1} {
				for _, stepBack := range []time.Duration{0, time.Hour} {
					start := time.Unix(1e9, 0)
					now := start
					c := newStartedCache(8, func() time.Time { return now })
					now = start.Add(5*time.Second + frac)
					f(c)
					now = now.Add(-stepBack).Add(after) // the claim begins
					c.remember(in, sums, []int{0}, c.since())
					remembered := c.held() > 0
					wantRemembered := stepBack == 0 && after >= startedMaxAge
					if remembered && !wantRemembered {
						t.Errorf("%s failed at +%v; claim begun %v after it (clock stepped back %v): remembered", name, frac, after, stepBack)
					}
					if !remembered && wantRemembered {
						t.Errorf("%s failed at +%v; claim begun %v after it: not remembered", name, frac, after)
					}
				}
			}
		}
	}
	// A second failure within the first's quiet moves it on.
	now := time.Unix(1e9, 0)
	c := newStartedCache(8, func() time.Time { return now })
	c.forgetAll()(true)
	now = now.Add(30 * time.Second)
	c.forgetAll()(true)
	now = now.Add(startedMaxAge - 1)
	c.remember(in, sums, []int{0}, c.since())
	if c.held() != 0 {
		t.Errorf("a claim begun within a minute after the second of two failures remembered")
	}
	// A failure the clock cannot tell quiets it for good.
	base := time.Unix(1e9, 0)
	now = base
	c = newStartedCache(8, func() time.Time { return now })
	now = base.Add(time.Duration(math.MaxInt64)).Add(time.Hour)
	c.forgetAll()(true)
	for _, at := range []time.Duration{0, time.Hour, 1000 * time.Hour} {
		now = base.Add(at)
		c.remember(in, sums, []int{0}, c.since())
		if c.held() != 0 {
			t.Errorf("after a failure at a time the clock cannot tell: a claim begun %v after the start remembered", at)
		}
	}
}

// A model of one handle's ledger rows, with re-run marks and purges that
// fail (return an error) and land later, at any moment less than
// startedMaxAge after they returned, by a clock that only runs forward;
// claims that read the rows at a moment between their since and their
// remember (the clock moving, landings and other changes in between); and
// rows started again by hand. Every answer of the memory must be what the
// rows hold at that moment: a started row of that ID with that hash.
// Adversary 40d: held.
func TestTheStartedCacheNeverAnswersARowAFailedChangeMovedOrDeletedWhenItLanded(t *testing.T) {
	type landing struct {
		at    time.Time
		purge bool
		sum   [32]byte
	}
	for _, entries := range []int{1, 3, 4, 7, 64} {
		for seed := range int64(30) {
			rng := rand.New(rand.NewSource(seed*1000 + int64(entries)))
			now := time.Unix(1e9, 0)
			c := newStartedCache(entries, func() time.Time { return now })
			ids := make([]string, 12)
			sums := make([][32]byte, len(ids))
			for i := range ids {
				ids[i] = fmt.Sprintf("activity-q:%d", i)
				_, sums[i] = keySumOf(ids[i])
			}
			hashes := [][32]byte{{1}, {2}}
			rows := map[[32]byte][32]byte{} // started at generation 1, by ID: its hash
			for i := range ids {
				rows[sums[i]] = hashes[rng.Intn(2)]
			}
			var landings []landing
			land := func() {
				kept := landings[:0]
				for _, l := range landings {
					if now.Before(l.at) {
						kept = append(kept, l)
						continue
					}
					if l.purge {
						clear(rows)
					} else {
						delete(rows, l.sum)
					}
				}
				landings = kept
			}
			tick := func() {
				if rng.Intn(10) == 0 {
					now = now.Add(time.Duration(rng.Int63n(int64(70 * time.Second))))
				} else {
					now = now.Add(time.Duration(rng.Int63n(int64(3 * time.Second))))
				}
				land()
			}
			change := func() {
				j := rng.Intn(len(ids))
				purge := rng.Intn(3) == 0
				var end func(bool)
				if purge {
					end = c.forgetAll()
				} else {
					end = c.forgetReruns([]processor.Started{{WorkflowID: ids[j], Generation: 2}})
				}
				if rng.Intn(2) == 0 { // it succeeds: lands before it returns
					if purge {
						clear(rows)
					} else {
						delete(rows, sums[j])
					}
					end(false)
					return
				}
				if rng.Intn(2) == 0 {
					tick()
				}
				end(true) // it failed: lands within a minute, or never
				if rng.Intn(4) != 0 {
					after := time.Duration(rng.Int63n(int64(startedMaxAge)))
					if rng.Intn(2) == 0 { // late: within the quiet's last seconds
						after = startedMaxAge - 1 - time.Duration(rng.Int63n(int64(2*time.Second)))
					}
					landings = append(landings, landing{at: now.Add(after), purge: purge, sum: sums[j]})
				}
			}
			for step := range 4000 {
				switch op := rng.Intn(100); {
				case op < 50: // a claim
					k := rng.Intn(len(ids))
					in := []decide.Intent{{WorkflowID: ids[k], PayloadHash: hashes[rng.Intn(2)]}}
					s := [][32]byte{sums[k]}
					since := c.since()
					got := make([]stored, 1)
					if left := c.answer(in, s, []int{0}, got); len(left) == 0 {
						if h, ok := rows[sums[k]]; !ok || h != in[0].PayloadHash {
							t.Fatalf("entries %d seed %d step %d: ID %d answered started with hash %x; its row: %x, %v", entries, seed, step, k, in[0].PayloadHash[0], h[0], ok)
						}
						continue
					}
					for rng.Intn(3) == 0 {
						tick()
					}
					h, ok := rows[sums[k]] // the read
					for rng.Intn(3) == 0 {
						if rng.Intn(2) == 0 {
							tick()
						} else {
							change()
						}
					}
					if ok && h == in[0].PayloadHash {
						c.remember(in, s, []int{0}, since)
					}
				case op < 60:
					change()
				case op < 70: // a row started again (claimed, marked at generation 1)
					k := rng.Intn(len(ids))
					if _, ok := rows[sums[k]]; !ok {
						rows[sums[k]] = hashes[rng.Intn(2)]
					}
				default:
					tick()
				}
				if n := c.held(); n > entries {
					t.Fatalf("entries %d: %d held", entries, n)
				}
			}
		}
	}
}

// singlePassAnswer is answer as it was before its two passes (4a4d2d3):
// every ID of uniq compared in full against its window, in uniq's order.
// The reference the two-pass answer must agree with.
func (c *startedCache) singlePassAnswer(intents []decide.Intent, sums [][32]byte, uniq []int, got []stored) []int {
	if c == nil {
		return uniq
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now, ok := c.nanos(c.now())
	if c.slots == nil || !ok {
		return uniq
	}
	left := uniq[:0:0]
next:
	for _, i := range uniq {
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

// sameStored says whether a and b record the same answer.
func sameStored(a, b stored) bool {
	return a.found == b.found && a.inserted == b.inserted && a.state == b.state &&
		string(a.hash) == string(b.hash) && a.generation == b.generation && (a.hash == nil) == (b.hash == nil)
}

// adversarialSums is a pool of SHA-256s built to trip a look-up that
// filters on bytes 8..16 of a slot's sum: groups that share those bytes
// but differ in the first 8 (other windows), in the last 16 (same window,
// another ID), or in one bit anywhere; groups that share the first 8 (one
// window) with other words; sums whose bytes 8..16 are zero, as a free
// slot's; and the all-zero sum.
func adversarialSums(rng *rand.Rand) [][32]byte {
	var pool [][32]byte
	rnd := func() (s [32]byte) {
		rng.Read(s[:])
		return s
	}
	for g := 0; g < 6; g++ {
		base := rnd()
		pool = append(pool, base)
		// Same word at 8..16, same window, differing later.
		for k := 16; k < 32; k += 5 {
			s := base
			s[k] ^= 1 << uint(rng.Intn(8))
			pool = append(pool, s)
		}
		// Same word at 8..16, differing in the first 8 bytes by a bit (a
		// near or the same window).
		for k := 0; k < 8; k += 3 {
			s := base
			s[k] ^= 1 << uint(rng.Intn(8))
			pool = append(pool, s)
		}
		// Same first 8 bytes (one window), another word.
		for n := 0; n < 3; n++ {
			s := rnd()
			copy(s[:8], base[:8])
			pool = append(pool, s)
		}
		// Same first 16, another tail.
		s := rnd()
		copy(s[:16], base[:16])
		pool = append(pool, s)
	}
	zeroWord := rnd()
	clear(zeroWord[8:16])
	pool = append(pool, zeroWord, [32]byte{})
	for n := 0; n < 10; n++ {
		pool = append(pool, rnd())
	}
	return pool
}

// The two-pass answer (a word of each window's slots first, then a full
// compare of the IDs a slot may hold) answers exactly what the single
// pass did: the same IDs left, in uniq's order, and the same got, on
// random tables whose slots hold sums that share bytes 8..16, the first
// 64 bits or all but one bit with the IDs looked up, with other payload
// hashes, too old, in the future, forgotten by a purge, or free; for
// batches that repeat an index, are empty, are longer than any before
// and then shorter (maybe's stale values), on one cache call after call.
func TestTheTwoPassAnswerAnswersExactlyWhatTheSinglePassDid(t *testing.T) {
	for _, entries := range []int{1, 2, 3, 4, 5, 7, 16, 64} {
		for seed := range int64(40) {
			rng := rand.New(rand.NewSource(seed*1000 + int64(entries)))
			pool := adversarialSums(rng)
			hashes := [][32]byte{{1}, {2}, {}}
			now := time.Unix(1e9, 0)
			c := newStartedCache(entries, func() time.Time { return now })
			c.slots = make([]startedSlot, entries)
			// Put random pool sums in their own windows (or, now and
			// then, in any slot: a sum need not sit in its window).
			for n := 0; n < 3*entries; n++ {
				sum := pool[rng.Intn(len(pool))]
				k := rng.Intn(entries)
				if rng.Intn(4) > 0 {
					w := c.window(&sum)
					base := 0
					for &c.slots[base] != &w[0] {
						base++
					}
					k = base + rng.Intn(len(w))
				}
				c.filled++
				var at int64
				switch rng.Intn(6) {
				case 0:
					at = int64(startedMaxAge) // too old by the time of the look-up, or not
				case 1:
					at = int64(10 * time.Hour) // in the future
				default:
					at = rng.Int63n(int64(startedMaxAge))
				}
				c.slots[k] = startedSlot{sum: sum, hash: hashes[rng.Intn(len(hashes))], at: at, seq: c.filled}
			}
			if rng.Intn(3) == 0 {
				c.forgot = uint64(rng.Intn(int(c.filled) + 1))
			}
			// Intents: each pool sum with each hash.
			var ins []decide.Intent
			var sums [][32]byte
			for _, s := range pool {
				for _, h := range hashes {
					ins = append(ins, decide.Intent{WorkflowID: fmt.Sprintf("%x", s), PayloadHash: h})
					sums = append(sums, s)
				}
			}
			lens := []int{0, 1, 3, 4 * len(ins), 2, 0, len(ins), 1, 7 * len(ins), 5}
			for round, n := range lens {
				now = time.Unix(1e9, 0).Add(time.Duration(rng.Int63n(int64(2 * startedMaxAge))))
				uniq := make([]int, n)
				for j := range uniq {
					uniq[j] = rng.Intn(len(ins))
				}
				if n > 2 && rng.Intn(2) == 0 {
					uniq[n-1] = uniq[0] // a repeated index
				}
				in := slices.Clone(uniq)
				gotOld, gotNew := make([]stored, len(ins)), make([]stored, len(ins))
				want := c.singlePassAnswer(ins, sums, slices.Clone(uniq), gotOld)
				left := c.answer(ins, sums, uniq, gotNew)
				if !slices.Equal(uniq, in) {
					t.Fatalf("entries %d seed %d round %d: answer changed uniq", entries, seed, round)
				}
				if !slices.Equal(left, want) {
					t.Fatalf("entries %d seed %d round %d (%d IDs): left %v, the single pass left %v",
						entries, seed, round, n, left, want)
				}
				for i := range gotOld {
					if !sameStored(gotOld[i], gotNew[i]) {
						t.Fatalf("entries %d seed %d round %d: got[%d] %+v, the single pass %+v",
							entries, seed, round, i, gotNew[i], gotOld[i])
					}
				}
			}
		}
	}
}

// Claims on one handle answer concurrently with remembers, re-runs'
// forgets and purges (run under -race: maybe is answer's scratch, shared
// by every claim of the handle): batches of every length from 0 to 300,
// that repeat indices, over IDs of which half were never remembered and
// share bytes 0..16 of their SHA-256 with a remembered one (its window
// and its word), differing only in the last byte. No never-remembered ID
// is ever answered, and what is answered comes back in uniq's order.
func TestConcurrentAnswersNeverAnswerAnIDSharingOnlyAWindowAndAWordWithARememberedOne(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1e9, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c := newStartedCache(64, clock)
	const n = 200
	ins, sums := make([]decide.Intent, 2*n), make([][32]byte, 2*n)
	rng := rand.New(rand.NewSource(41))
	for i := 0; i < n; i++ {
		rng.Read(sums[i][:])
		sums[n+i] = sums[i]
		sums[n+i][31] ^= 0x80 // same window, same word, another ID
		ins[i] = decide.Intent{WorkflowID: fmt.Sprintf("kept:%d", i), PayloadHash: [32]byte{1}}
		ins[n+i] = decide.Intent{WorkflowID: fmt.Sprintf("never:%d", i), PayloadHash: [32]byte{1}}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(g)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				switch op := rng.Intn(10); {
				case op < 7:
					at := make([]int, 1+rng.Intn(20))
					for j := range at {
						at[j] = rng.Intn(n)
					}
					c.remember(ins, sums, at, c.since())
				case op < 9:
					j := rng.Intn(n)
					c.rerunsChange([][32]byte{sums[j]}, 1, false)
					c.rerunsChange([][32]byte{sums[j]}, -1, false)
				default:
					c.forgetAll()(false)
				}
				mu.Lock()
				now = now.Add(time.Duration(rng.Int63n(int64(time.Second))))
				mu.Unlock()
			}
		}(g)
	}
	var answerers sync.WaitGroup
	errs := make(chan string, 4)
	for g := 0; g < 3; g++ {
		answerers.Add(1)
		go func(g int) {
			defer answerers.Done()
			rng := rand.New(rand.NewSource(100 + int64(g)))
			for round := 0; round < 3000; round++ {
				uniq := make([]int, rng.Intn(301))
				for j := range uniq {
					uniq[j] = rng.Intn(2 * n)
				}
				got := make([]stored, 2*n)
				left := c.answer(ins, sums, uniq, got)
				// left is uniq less the answered, in order.
				k := 0
				for _, i := range uniq {
					if k < len(left) && left[k] == i {
						k++
						continue
					}
					if !got[i].found {
						errs <- fmt.Sprintf("index %d neither left nor answered", i)
						return
					}
					if i >= n {
						errs <- fmt.Sprintf("%s, never remembered, answered duplicate", ins[i].WorkflowID)
						return
					}
				}
				if k != len(left) {
					errs <- fmt.Sprintf("left %v is not uniq %v less the answered", left, uniq)
					return
				}
			}
		}(g)
	}
	answerers.Wait()
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// Once warm (its scratch as long as the batch), answer allocates nothing
// for a batch it answers whole, and no more than the single pass did for
// one it answers in part (left, only).
func TestAWarmAnswerAllocatesNoMoreThanTheSinglePassDid(t *testing.T) {
	now := time.Unix(1e9, 0)
	c := newStartedCache(100_000, func() time.Time { return now })
	const n = 1000
	ins, sums := make([]decide.Intent, 2*n), make([][32]byte, 2*n)
	for i := range ins {
		ins[i] = decide.Intent{WorkflowID: fmt.Sprintf("activity-a:%d", i), PayloadHash: [32]byte{3}}
		_, sums[i] = keySumOf(ins[i].WorkflowID)
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	c.remember(ins, sums, all, c.since())
	got := make([]stored, 2*n)
	if left := c.answer(ins, sums, all, got); len(left) != 0 {
		t.Fatalf("%d of %d just remembered left", len(left), n)
	}
	if a := testing.AllocsPerRun(100, func() { c.answer(ins, sums, all, got) }); a != 0 {
		t.Errorf("a warm answer of %d remembered IDs: %v allocations", n, a)
	}
	half := make([]int, n)
	for i := range half {
		half[i] = 2 * i // every other one remembered
	}
	c.answer(ins, sums, half, got)
	newA := testing.AllocsPerRun(100, func() { c.answer(ins, sums, half, got) })
	oldA := testing.AllocsPerRun(100, func() { c.singlePassAnswer(ins, sums, half, got) })
	if newA > oldA {
		t.Errorf("a warm answer of half remembered IDs: %v allocations, the single pass %v", newA, oldA)
	}
	// Shorter batches after a long one allocate no scratch either.
	for _, m := range []int{0, 1, 10, n / 2} {
		if a := testing.AllocsPerRun(50, func() { c.answer(ins, sums, all[:m], got) }); a != 0 {
			t.Errorf("a warm answer of %d remembered IDs after %d: %v allocations", m, n, a)
		}
	}
}

// answer's scratch is at most what the handle's largest batch needed,
// whatever the batches after it: one byte an ID of that batch, which the
// batch itself (its intents, sums, keys and answers, hundreds of bytes an
// ID) needed many times over, and which max_in_flight bounds; it never
// grows with the number of calls, nor with a memory that holds nothing.
func TestTheAnswersScratchIsBoundedByTheLargestBatch(t *testing.T) {
	now := time.Unix(1e9, 0)
	c := newStartedCache(8, func() time.Time { return now })
	ins, sums := make([]decide.Intent, 1), make([][32]byte, 1)
	_, sums[0] = keySumOf("activity-a:x")
	c.remember(ins, sums, []int{0}, c.since())
	got := make([]stored, 1)
	largest := 0
	rng := rand.New(rand.NewSource(7))
	for round := 0; round < 2000; round++ {
		m := rng.Intn(5000)
		if round%500 == 0 {
			m = 20_000 * (1 + round/500)
		}
		largest = max(largest, m)
		uniq := make([]int, m) // every index 0: the one ID, again and again
		c.answer(ins, sums, uniq, got)
		if cap(c.maybe) > 2*largest+64 {
			t.Fatalf("round %d: scratch of %d after batches of at most %d", round, cap(c.maybe), largest)
		}
	}
	// An empty memory (nothing remembered yet, or the clock beyond what
	// it tells) takes no scratch at all.
	fresh := newStartedCache(8, func() time.Time { return now })
	fresh.answer(ins, sums, make([]int, 100_000), got)
	if cap(fresh.maybe) != 0 {
		t.Errorf("a memory that holds nothing took a scratch of %d", cap(fresh.maybe))
	}
}

// newIDs are n intents of IDs prefix:from.. and their SHA-256.
func newIDs(prefix string, from, n int) ([]decide.Intent, [][32]byte) {
	ins, sums := make([]decide.Intent, n), make([][32]byte, n)
	for i := range ins {
		ins[i] = decide.Intent{WorkflowID: fmt.Sprintf("%s:%d", prefix, from+i), PayloadHash: [32]byte{1}}
		_, sums[i] = keySumOf(ins[i].WorkflowID)
	}
	return ins, sums
}

// claimFoundStarted is a claim's use of c whose ledger read finds every
// ID it did not answer started, generation 1, with its payload: it
// answers, then remembers the rest; it returns how many c answered.
func (c *startedCache) claimFoundStarted(ins []decide.Intent, sums [][32]byte) int {
	uniq := make([]int, len(ins))
	for i := range uniq {
		uniq[i] = i
	}
	since := c.since()
	got := make([]stored, len(ins))
	left := c.answer(ins, sums, uniq, got)
	c.remember(ins, sums, left, since)
	return len(ins) - len(left)
}

// A router that alternates between new events (a partition's backlog:
// 5,000 IDs no claim saw, in batches of 500) and a producer's retries
// (5,000 copies of 2,000 IDs it claimed within the minute), 20 rounds:
// the memory answers the retries, 97% of them (a window of startedWays
// slots can be full; the first round's first copies are read), however
// few of the IDs it is asked in between it answers. At least 90% must be
// (adversary 65a: a memory that kept only a sample of 1 ID in 16 while it
// answered rarely answered 32% of them).
func TestAlternatingNewEventsAndRetriesAnswerTheRetriesFromMemory(t *testing.T) {
	now := time.Unix(1e9, 0)
	c := newStartedCache(100_000, func() time.Time { return now })
	retry, rsums := newIDs("retry", 0, 2000)
	next, hits, asked := 0, 0, 0
	for b := range 400 {
		if (b/10)%2 == 0 {
			c.claimFoundStarted(newIDs("new", next, 500))
			next += 500
			continue
		}
		k := (b * 500) % 2000
		hits += c.claimFoundStarted(retry[k:k+500], rsums[k:k+500])
		asked += 500
	}
	if hits*10 < asked*9 {
		t.Errorf("retries alternating with new events: %d of %d answered from memory (%d read), want at least 90%%", hits, asked, asked-hits)
	}
}

// BenchmarkStartedCacheReplayOfNewIDs is a replay of IDs no claim saw
// before (a backlog read again by a new consumer group): no look-up
// answers one, and every ID costs a look-up and a write of a slot out of
// the processor's caches (about 190 ns, session 65), which the read that
// answers it anyway does not need.
func BenchmarkStartedCacheReplayOfNewIDs(b *testing.B) {
	other := make([]byte, 64<<20)
	now := time.Unix(1e9, 0)
	c := newStartedCache(100_000, func() time.Time { return now })
	const batch = 1000
	uniq, got := make([]int, batch), make([]stored, batch)
	hits := 0
	b.ResetTimer()
	for n := 0; n < b.N; n += batch {
		b.StopTimer()
		for k := 0; k < len(other); k += 64 {
			other[k]++
		}
		ins, sums := newIDs("activity-a", n, batch)
		for j := range uniq {
			uniq[j], got[j] = j, stored{}
		}
		b.StartTimer()
		since := c.since()
		left := c.answer(ins, sums, uniq, got)
		hits += batch - len(left)
		c.remember(ins, sums, left, since)
	}
	b.ReportMetric(float64(hits)/float64(b.N), "hits/ID")
}
