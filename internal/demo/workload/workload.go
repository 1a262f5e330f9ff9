// Package workload generates Kafka records with a known amount of
// duplication, for the dev stack's demo producer, the integration tests and
// the benchmark. It is deterministic for a given Spec (seeded), so a failing
// run can be repeated.
package workload

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Spec describes a workload.
type Spec struct {
	Topic      string
	Partitions int
	// Records is the total number of records produced.
	Records int
	// DupRatio is the share of records that re-send an earlier event:
	// identical re-sends of events with IDs, and re-sends of ID-less events
	// with their JSON keys reordered and re-spaced (same content ID).
	DupRatio float64
	// Conflicts re-send an earlier TypeOrder event's ID with a different
	// payload, produced after the original. In the original's partition
	// (the default) the original always wins; see ConflictCrossPartition.
	Conflicts int
	// ConflictCrossPartition is the share of conflicts sent to another
	// partition than the original's (always another one; needs Partitions
	// > 1). A consumer may then read the conflicting copy before the
	// original, so which copy wins is no longer fixed by the workload: see
	// Workload.ConflictSets for what a correct consumer guarantees. 0 (the
	// default) keeps every conflict in the original's partition and leaves
	// the generated records as they were before this field existed.
	ConflictCrossPartition float64
	// CrossPartition is the share of duplicates sent to another partition
	// than the original (a producer that re-keyed, or a replay tool).
	CrossPartition float64
	// PayloadBytes pads each payload to about this size.
	PayloadBytes int
	Seed         uint64
	// IDPrefix keeps IDs of two workloads on one stack apart.
	IDPrefix string
}

// Types the workload uses. TypeSignup is meant to be routed to two
// activities, TypeOrder to one, TypeUnrouted to none.
const (
	TypeOrder    = "order.created"
	TypeSignup   = "user.signed_up"
	TypeUnrouted = "audit.logged"
)

// Event is one logical (unique) event of a workload.
type Event struct {
	ID   string // empty for ID-less events (content-derived ID)
	Type string
	// Record is the first record that carries it.
	Record *kgo.Record
}

// Workload is the generated records and what a correct consumer does with
// them.
type Workload struct {
	Records []*kgo.Record
	// Unique are the logical events, in production order.
	Unique []Event
	// Duplicates counts re-sends; Conflicts counts same-ID-other-payload
	// records. While every conflict is in its original's partition
	// (CrossConflicts == 0), the original wins and Conflicts is exactly what
	// a correct consumer dead-letters as conflicts; otherwise that depends on
	// which copy won: see ConflictSets.
	Duplicates, Conflicts int
	// CrossConflicts counts the conflicts sent to another partition than
	// their original's.
	CrossConflicts int
	// CrossDuplicates counts the re-sends sent to another partition than
	// their original's: the copies that two consumers of one group may
	// claim together with their original.
	CrossDuplicates int
	// ConflictSets has one entry per event ID that got conflicts, in the
	// order of their first conflict.
	ConflictSets []*ConflictSet
}

// ConflictSet is every record of one event ID that got conflicts, grouped
// by payload. Whatever the order of consumption, a correct consumer starts
// exactly one workflow for the ID (its one route), with the payload of one
// variant (the winner: the first copy claimed), and dead-letters as
// `conflict` every record of the other variants. Re-sends of the original
// belong to the original's variant, so if a conflicting copy wins, they
// are dead-lettered too.
type ConflictSet struct {
	// Event is the original.
	Event Event
	// Variants are the distinct payloads; Variants[0] is the original's.
	Variants []*Variant
	// Fixed reports whether the winner is fixed by the workload: every
	// conflict is in the original's partition after it, so the original
	// (or an identical re-send) is always claimed first and Variants[0]
	// wins.
	Fixed bool
}

// Variant is one payload of a conflicted event ID and the records that
// carry it.
type Variant struct {
	// Payload is the event's data fields as generated (for the plain
	// formats, the record's fields other than id, type and source).
	Payload map[string]any
	Records []*kgo.Record
}

// Records counts the set's records.
func (c *ConflictSet) Records() int {
	n := 0
	for _, v := range c.Variants {
		n += len(v.Records)
	}
	return n
}

// DeadLetters is how many of the set's records a correct consumer
// dead-letters as conflicts when variant winner won: all the others'.
func (c *ConflictSet) DeadLetters(winner int) int {
	return c.Records() - len(c.Variants[winner].Records)
}

// VariantOf returns the index of the variant whose payload data (a
// workflow input's data, say) carries, or -1 if none: data must be a JSON
// object holding every field of the variant's payload with the same value.
func (c *ConflictSet) VariantOf(data []byte) int {
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		return -1
	}
	for i, v := range c.Variants {
		if carries(got, v.Payload) {
			return i
		}
	}
	return -1
}

// carries compares through JSON, so that numbers compare as decoded.
func carries(got, want map[string]any) bool {
	for k, wv := range want {
		gv, ok := got[k]
		if !ok {
			return false
		}
		a, _ := json.Marshal(gv)
		b, _ := json.Marshal(wv)
		if string(a) != string(b) {
			return false
		}
	}
	return true
}

// ConflictSet returns the set of the event ID, or nil.
func (w *Workload) ConflictSet(eventID string) *ConflictSet {
	for _, c := range w.ConflictSets {
		if c.Event.ID == eventID {
			return c
		}
	}
	return nil
}

// CountType returns how many unique events have the type.
func (w *Workload) CountType(typ string) int {
	n := 0
	for _, e := range w.Unique {
		if e.Type == typ {
			n++
		}
	}
	return n
}

type logical struct {
	Event
	format  int // 0 structured CE, 1 binary CE, 2 plain with id, 3 plain without id
	key     string
	part    int32
	payload map[string]any
	// records are the original and its identical re-sends; set holds the
	// conflicts once there is one.
	records []*kgo.Record
	set     *ConflictSet
}

// Generate builds the workload.
func Generate(s Spec) *Workload {
	if s.Partitions <= 0 {
		s.Partitions = 1
	}
	rng := rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15))
	dups := int(float64(s.Records) * s.DupRatio)
	unique := s.Records - dups - s.Conflicts
	if unique < 1 {
		unique = 1
	}
	w := &Workload{}
	var events []*logical
	var withID []*logical
	pad := ""
	if s.PayloadBytes > 200 {
		pad = strings.Repeat("x", s.PayloadBytes-200)
	}
	// Interleave: each step emits a unique event, a duplicate or a conflict,
	// in proportion, so duplicates are spread over the whole run.
	remainingU, remainingD, remainingC := unique, dups, s.Conflicts
	for remainingU+remainingD+remainingC > 0 {
		total := remainingU + remainingD + remainingC
		pick := rng.IntN(total)
		switch {
		case pick < remainingU || len(events) == 0:
			remainingU--
			n := len(events)
			typ := TypeOrder
			switch r := rng.IntN(100); {
			case r < 25:
				typ = TypeSignup
			case r < 30:
				typ = TypeUnrouted
			}
			e := &logical{format: rng.IntN(4), key: fmt.Sprintf("%scustomer-%d", s.IDPrefix, rng.IntN(1+unique/3))}
			e.Type = typ
			if e.format != 3 {
				e.ID = fmt.Sprintf("%sevt-%d", s.IDPrefix, n)
			}
			e.part = partitionOf(e.key, s.Partitions)
			e.payload = map[string]any{"n": n, "customer": e.key, "amount": float64(rng.IntN(100000)) / 100, "pad": pad}
			e.Record = e.record(s.Topic, e.part, false)
			e.records = []*kgo.Record{e.Record}
			events = append(events, e)
			if e.ID != "" && e.Type == TypeOrder { // one route: one conflict row per conflict record
				withID = append(withID, e)
			}
			w.Records = append(w.Records, e.Record)
			w.Unique = append(w.Unique, e.Event)
		case pick < remainingU+remainingD:
			remainingD--
			e := events[rng.IntN(len(events))]
			part := e.part
			if rng.Float64() < s.CrossPartition {
				part = int32(rng.IntN(s.Partitions))
			}
			r := e.record(s.Topic, part, true)
			e.records = append(e.records, r)
			w.Records = append(w.Records, r)
			w.Duplicates++
			if part != e.part {
				w.CrossDuplicates++
			}
		default:
			remainingC--
			if len(withID) == 0 {
				remainingU++ // nothing to conflict with yet; emit a unique one first
				continue
			}
			e := withID[rng.IntN(len(withID))]
			c := logical{Event: e.Event, format: e.format, key: e.key}
			c.payload = map[string]any{}
			for k, v := range e.payload {
				c.payload[k] = v
			}
			c.payload["amount"] = e.payload["amount"].(float64) + 1
			part := e.part
			if s.ConflictCrossPartition > 0 && s.Partitions > 1 && rng.Float64() < s.ConflictCrossPartition {
				part = (e.part + 1 + int32(rng.IntN(s.Partitions-1))) % int32(s.Partitions)
				w.CrossConflicts++
			}
			r := c.record(s.Topic, part, false)
			w.Records = append(w.Records, r)
			w.Conflicts++
			if e.set == nil {
				e.set = &ConflictSet{Event: e.Event, Variants: []*Variant{{Payload: e.payload}}, Fixed: true}
				w.ConflictSets = append(w.ConflictSets, e.set)
			}
			e.set.add(c.payload, r)
			if part != e.part {
				e.set.Fixed = false
			}
		}
	}
	// The original's variant gets its re-sends, including those sent after
	// the conflicts were generated.
	for _, e := range withID {
		if e.set != nil {
			e.set.Variants[0].Records = e.records
		}
	}
	// Each record's Offset is the one it gets when the records are
	// produced in order to an empty topic (the manual partitioner keeps
	// Partition), so that what is computed from them before they are
	// produced (a ledger filled beforehand) names their records.
	next := make(map[int32]int64, s.Partitions)
	for _, r := range w.Records {
		r.Offset = next[r.Partition]
		next[r.Partition]++
	}
	return w
}

// add files a conflicting record under its payload's variant.
func (c *ConflictSet) add(payload map[string]any, r *kgo.Record) {
	key := render(payload, false)
	for _, v := range c.Variants[1:] {
		if render(v.Payload, false) == key {
			v.Records = append(v.Records, r)
			return
		}
	}
	c.Variants = append(c.Variants, &Variant{Payload: payload, Records: []*kgo.Record{r}})
}

// record renders the event; reshaped re-renders it with another key order
// and spacing (the same JSON value).
func (e *logical) record(topic string, part int32, reshaped bool) *kgo.Record {
	r := &kgo.Record{Topic: topic, Partition: part, Key: []byte(e.key)}
	data := render(e.payload, reshaped)
	switch e.format {
	case 0:
		r.Value = []byte(fmt.Sprintf(`{"specversion":"1.0","id":%q,"type":%q,"source":"demo-shop","time":"2026-11-22T10:00:00Z","data":%s}`, e.ID, e.Type, data))
	case 1:
		r.Value = []byte(data)
		r.Headers = []kgo.RecordHeader{
			{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte(e.ID)},
			{Key: "ce_type", Value: []byte(e.Type)}, {Key: "ce_source", Value: []byte("demo-shop")},
		}
	default:
		m := map[string]any{"type": e.Type, "source": "demo-shop"}
		for k, v := range e.payload {
			m[k] = v
		}
		if e.format == 2 {
			m["id"] = e.ID
		}
		r.Value = []byte(render(m, reshaped))
	}
	return r
}

// render writes a flat map as JSON, keys sorted or reversed with extra
// spaces.
func render(m map[string]any, reshaped bool) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	sep, colon := ",", ":"
	if reshaped {
		for i, j := 0, len(keys)-1; i < j; i, j = i+1, j-1 {
			keys[i], keys[j] = keys[j], keys[i]
		}
		sep, colon = " ,\n  ", " : "
	}
	var b strings.Builder
	b.WriteString("{")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(sep)
		}
		kb, _ := json.Marshal(k)
		vb, _ := json.Marshal(m[k])
		b.Write(kb)
		b.WriteString(colon)
		b.Write(vb)
	}
	b.WriteString("}")
	return b.String()
}

func partitionOf(key string, n int) int32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int32(h % uint32(n))
}
