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
	// payload, in the original's partition after it (so which copy wins is
	// fixed).
	Conflicts int
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
	// records.
	Duplicates, Conflicts int
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
			w.Records = append(w.Records, e.record(s.Topic, part, true))
			w.Duplicates++
		default:
			remainingC--
			if len(withID) == 0 {
				remainingU++ // nothing to conflict with yet; emit a unique one first
				continue
			}
			e := withID[rng.IntN(len(withID))]
			c := *e
			c.payload = map[string]any{}
			for k, v := range e.payload {
				c.payload[k] = v
			}
			c.payload["amount"] = e.payload["amount"].(float64) + 1
			w.Records = append(w.Records, c.record(s.Topic, e.part, false))
			w.Conflicts++
		}
	}
	return w
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
