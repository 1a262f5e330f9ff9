package workload

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/eventid"
)

func decode(t *testing.T, kr *kgo.Record) eventid.Event {
	t.Helper()
	d, err := eventid.NewDecoder(eventid.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	r := eventid.Record{Topic: kr.Topic, Partition: kr.Partition, Key: kr.Key, Value: kr.Value}
	r.Headers = append(r.Headers, kr.Headers...)
	ev, err := d.Decode(r)
	if err != nil {
		t.Fatalf("decoding %s: %v", kr.Value, err)
	}
	return ev
}

func sameRecords(a, b []*kgo.Record) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Partition != b[i].Partition || !bytes.Equal(a[i].Key, b[i].Key) || !bytes.Equal(a[i].Value, b[i].Value) || len(a[i].Headers) != len(b[i].Headers) {
			return false
		}
	}
	return true
}

func TestDeterministic(t *testing.T) {
	s := Spec{Topic: "t", Partitions: 8, Records: 5000, DupRatio: 0.3, CrossPartition: 0.2, Conflicts: 40, ConflictCrossPartition: 0.5, Seed: 7}
	a, b := Generate(s), Generate(s)
	if !sameRecords(a.Records, b.Records) {
		t.Fatal("two runs of one spec differ")
	}
	if a.Conflicts != b.Conflicts || a.CrossConflicts != b.CrossConflicts || len(a.ConflictSets) != len(b.ConflictSets) {
		t.Fatalf("counts differ: %d/%d/%d vs %d/%d/%d", a.Conflicts, a.CrossConflicts, len(a.ConflictSets), b.Conflicts, b.CrossConflicts, len(b.ConflictSets))
	}
	for i := range a.ConflictSets {
		ca, cb := a.ConflictSets[i], b.ConflictSets[i]
		if ca.Event.ID != cb.Event.ID || ca.Fixed != cb.Fixed || len(ca.Variants) != len(cb.Variants) {
			t.Fatalf("conflict set %d differs", i)
		}
		for j := range ca.Variants {
			if !sameRecords(ca.Variants[j].Records, cb.Variants[j].Records) {
				t.Fatalf("conflict set %d variant %d differs", i, j)
			}
		}
	}
	s.Seed++
	if sameRecords(a.Records, Generate(s).Records) {
		t.Fatal("another seed gave the same records")
	}
}

func TestCounts(t *testing.T) {
	for _, s := range []Spec{
		{Topic: "t", Partitions: 8, Records: 10000, DupRatio: 0.3, CrossPartition: 0.2, Conflicts: 25, Seed: 1},
		{Topic: "t", Partitions: 8, Records: 10000, DupRatio: 0.3, CrossPartition: 0.2, Conflicts: 25, ConflictCrossPartition: 0.5, Seed: 1},
		{Topic: "t", Partitions: 2, Records: 1000, DupRatio: 0.1, Conflicts: 100, ConflictCrossPartition: 1, Seed: 3},
	} {
		w := Generate(s)
		if len(w.Records) != s.Records {
			t.Errorf("%+v: %d records", s, len(w.Records))
		}
		if w.Duplicates != int(float64(s.Records)*s.DupRatio) || w.Conflicts != s.Conflicts {
			t.Errorf("%+v: %d duplicates, %d conflicts", s, w.Duplicates, w.Conflicts)
		}
		if len(w.Unique)+w.Duplicates+w.Conflicts != len(w.Records) {
			t.Errorf("%+v: %d unique + %d duplicates + %d conflicts != %d records", s, len(w.Unique), w.Duplicates, w.Conflicts, len(w.Records))
		}
		// Every conflict record is in exactly one set, as a non-original
		// variant; the original's variant holds the original first.
		conflicts := 0
		seen := map[*kgo.Record]bool{}
		for _, c := range w.ConflictSets {
			if c.Event.Type != TypeOrder || c.Event.ID == "" {
				t.Fatalf("conflict set of %+v: want an order with an ID", c.Event)
			}
			if c.Variants[0].Records[0] != c.Event.Record {
				t.Errorf("%s: variant 0 does not start with the original", c.Event.ID)
			}
			conflicts += c.DeadLetters(0)
			if c.DeadLetters(0) != c.Records()-len(c.Variants[0].Records) || len(c.Variants) < 2 {
				t.Errorf("%s: %d variants, %d dead letters if the original wins", c.Event.ID, len(c.Variants), c.DeadLetters(0))
			}
			for _, v := range c.Variants {
				for _, r := range v.Records {
					if seen[r] {
						t.Fatalf("%s: a record is in two variants", c.Event.ID)
					}
					seen[r] = true
				}
			}
		}
		if conflicts != w.Conflicts {
			t.Errorf("%+v: sets hold %d conflict records, want %d", s, conflicts, w.Conflicts)
		}
	}
}

// TestConflictSetsDecode checks the sets against the decoder the router
// uses: one ID per set, one payload hash per variant, distinct across
// variants, and VariantOf finds each record's variant from its data.
func TestConflictSetsDecode(t *testing.T) {
	w := Generate(Spec{Topic: "t", Partitions: 4, Records: 3000, DupRatio: 0.4, CrossPartition: 0.3, Conflicts: 60, ConflictCrossPartition: 0.5, Seed: 5})
	multi := 0
	for _, c := range w.ConflictSets {
		if len(c.Variants) > 2 {
			multi++
		}
		hashes := map[[32]byte]int{}
		for i, v := range c.Variants {
			for _, r := range v.Records {
				ev := decode(t, r)
				if ev.ID != c.Event.ID {
					t.Fatalf("record of set %s decodes to ID %s", c.Event.ID, ev.ID)
				}
				if j, ok := hashes[ev.PayloadHash]; ok && j != i {
					t.Fatalf("%s: variants %d and %d have one payload hash", c.Event.ID, j, i)
				}
				hashes[ev.PayloadHash] = i
				if got := c.VariantOf(ev.Data); got != i {
					t.Fatalf("%s: VariantOf(%s) = %d, want %d", c.Event.ID, ev.Data, got, i)
				}
			}
		}
		if len(hashes) != len(c.Variants) {
			t.Errorf("%s: %d payload hashes for %d variants", c.Event.ID, len(hashes), len(c.Variants))
		}
	}
	if c := w.ConflictSets[0]; w.ConflictSet(c.Event.ID) != c || w.ConflictSet("no-such-id") != nil {
		t.Error("ConflictSet does not find the sets by ID")
	}
	if c := w.ConflictSets[0]; c.VariantOf([]byte(`{"amount":-1}`)) != -1 || c.VariantOf([]byte(`not json`)) != -1 {
		t.Error("VariantOf matched foreign data")
	}
	t.Logf("%d sets, %d with more than two variants", len(w.ConflictSets), multi)
}

func TestConflictPartitions(t *testing.T) {
	base := Spec{Topic: "t", Partitions: 8, Records: 20000, DupRatio: 0.3, CrossPartition: 0.2, Conflicts: 200, Seed: 11}
	for _, tc := range []struct {
		share    float64
		min, max int // conflict records on another partition than the original
	}{{0, 0, 0}, {0.5, 60, 140}, {1, 200, 200}} {
		s := base
		s.ConflictCrossPartition = tc.share
		w := Generate(s)
		cross, unfixed := 0, 0
		for _, c := range w.ConflictSets {
			home := c.Event.Record.Partition
			crossHere := 0
			for _, v := range c.Variants[1:] {
				for _, r := range v.Records {
					if r.Partition != home {
						crossHere++
					}
				}
			}
			cross += crossHere
			if c.Fixed != (crossHere == 0) {
				t.Errorf("share %v: set %s Fixed=%v with %d conflicts on other partitions", tc.share, c.Event.ID, c.Fixed, crossHere)
			}
			if !c.Fixed {
				unfixed++
			}
		}
		if cross != w.CrossConflicts || cross < tc.min || cross > tc.max {
			t.Errorf("share %v: %d conflicts on another partition (CrossConflicts %d), want %d..%d", tc.share, cross, w.CrossConflicts, tc.min, tc.max)
		}
		t.Logf("share %v: %d of %d conflicts cross-partition, %d of %d sets not fixed", tc.share, cross, w.Conflicts, unfixed, len(w.ConflictSets))
	}
	// One partition: nowhere else to go.
	w := Generate(Spec{Topic: "t", Partitions: 1, Records: 1000, Conflicts: 20, ConflictCrossPartition: 1, Seed: 1})
	if w.CrossConflicts != 0 || w.Conflicts != 20 {
		t.Errorf("one partition: %d cross-partition conflicts of %d", w.CrossConflicts, w.Conflicts)
	}
}
