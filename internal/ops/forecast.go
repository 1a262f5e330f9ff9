package ops

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/replay"
	"github.com/dedupio/dedup/sink/ledger"
)

// Forecast counts what the records of a replay will do, as the ledger
// stands now. Intents are (record, route) pairs.
type Forecast struct {
	Records int `json:"records"`
	Intents int `json:"intents"`
	// NewWorkflows are intents whose workflow ID the ledger does not know
	// (each counted once): workflows expected to start.
	NewWorkflows int `json:"new_workflows"`
	// Duplicates are intents of started rows: skipped without a Temporal
	// call, except MayRerun of them, whose routes use an allow_* policy:
	// each asks Temporal and runs again if its last run closed the way the
	// policy allows.
	Duplicates int `json:"duplicates"`
	MayRerun   int `json:"may_rerun"`
	// Redrives are intents of pending rows (started again: the reuse
	// policy or request ID makes that safe), Reclaims of dead_lettered
	// rows (claimed and started again).
	Redrives int `json:"redrives"`
	Reclaims int `json:"reclaims"`
	// Conflicts are intents whose payload differs from the row's.
	Conflicts int `json:"conflicts"`
	// DeadLetters are records dead-lettered before any claim, of which
	// DeadLettersLogged are in the dead-letter log already (not written
	// again).
	DeadLetters       int `json:"dead_letters"`
	DeadLettersLogged int `json:"dead_letters_logged"`
	NoRoute           int `json:"no_route"`
	// Tombstones are records with a null value and no CloudEvents
	// headers: skipped, as the router does.
	Tombstones int `json:"tombstones"`
}

// forecast reads the records the moves re-read, decides each with the
// router's code and asks the ledger what it would answer. It reads what
// the router reads (kafka.isolation_level): under read_committed no record
// of an aborted transaction, and none at or past the last stable offset
// (stable), whose transaction is still open; notes says so.
func (t *Tool) forecast(ctx context.Context, moves []PartitionMove, stable map[string]map[int32]int64) (*Forecast, []string, error) {
	f := &Forecast{}
	var notes []string
	spans := map[string]map[int32]replay.Span{}
	for _, mv := range moves {
		if mv.Reread == 0 {
			continue
		}
		until := mv.To + mv.Reread
		if s := stable[mv.Topic][mv.Partition]; until > s {
			notes = append(notes, fmt.Sprintf("%s/%d: offsets %d..%d are in a transaction still open: not forecast "+
				"(the router reads the records of it once it commits, none if it aborts)", mv.Topic, mv.Partition, s, until-1))
			until = s
		}
		if spans[mv.Topic] == nil {
			spans[mv.Topic] = map[int32]replay.Span{}
		}
		spans[mv.Topic][mv.Partition] = replay.Span{From: mv.To, Until: until}
	}
	if len(spans) == 0 {
		return f, notes, nil
	}
	led, err := t.ledger(ctx)
	if err != nil {
		return f, notes, err
	}
	rd, err := t.reader(spans)
	if err != nil {
		return f, notes, err
	}
	defer rd.Close()
	seen := map[string]string{} // workflow ID -> what the replay has made of it so far
	for !rd.Done() {
		batch, err := rd.Poll(ctx, 5000)
		if err != nil {
			return f, notes, fmt.Errorf("reading the records to re-read: %w", err)
		}
		if err := t.forecastBatch(ctx, led, batch, seen, f); err != nil {
			return f, notes, err
		}
	}
	for _, s := range rd.Stalls {
		notes = append(notes, "not read to the end: "+s.String())
	}
	return f, notes, nil
}

// forecastBatch adds the records of one poll to f.
func (t *Tool) forecastBatch(ctx context.Context, led *ledger.Postgres, batch []*kgo.Record, seen map[string]string, f *Forecast) error {
	var (
		intents []decide.Intent
		routes  []*decide.Route // of each intent
		dls     []processor.DeadLetter
	)
	for _, kr := range batch {
		f.Records++
		d, err := t.decide(ctx, kr)
		if err != nil {
			return err
		}
		switch {
		case d.Tombstone:
			f.Tombstones++
		case d.DeadLetter != "":
			f.DeadLetters++
			dls = append(dls, processor.DeadLetter{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset})
		case d.Skipped():
			f.NoRoute++
		default:
			intents = append(intents, d.Intents...)
			for j := range d.Intents {
				routes = append(routes, d.Routes[j])
			}
		}
	}
	if len(dls) > 0 {
		written, err := led.Written(ctx, dls)
		if err != nil {
			return err
		}
		for _, w := range written {
			if w {
				f.DeadLettersLogged++
			}
		}
	}
	if len(intents) == 0 {
		return nil
	}
	ids := make([]string, 0, len(intents))
	for _, in := range intents {
		ids = append(ids, in.WorkflowID)
	}
	rows, err := led.Rows(ctx, ids)
	if err != nil {
		return err
	}
	byID := make(map[string]*ledger.Row, len(rows))
	for i := range rows {
		byID[rows[i].WorkflowID] = &rows[i]
	}
	for i, in := range intents {
		f.Intents++
		row := byID[in.WorkflowID]
		// The ledger's verdict on the row as it stands; an ID it does
		// not know, the replay's first copy claims (inserts).
		state, same, inserted, gen := ledger.StatePending, true, true, 0
		if row != nil {
			state, same, inserted, gen = row.State, string(row.PayloadHash) == string(in.PayloadHash[:]), false, row.Generation
		}
		v, reclaims := decide.ClaimVerdict(state, same, inserted, gen)
		switch {
		case row == nil && seen[in.WorkflowID] != "":
			// A later copy of an ID the replay's first copy claims: a
			// duplicate of that claim. (Its payload is not compared with
			// the first copy's: a copy with another payload, a conflict
			// when replayed, is counted here too.)
			f.Duplicates++
		case v.Verdict == decide.VerdictConflict:
			f.Conflicts++
		case v.Verdict == decide.VerdictNew:
			f.NewWorkflows++
			seen[in.WorkflowID] = "new"
		case v.Verdict == decide.VerdictDuplicate:
			f.Duplicates++
			if routes[i].MayRerun() {
				f.MayRerun++
			}
		case seen[in.WorkflowID] != "":
			// Re-driven or re-claimed by an earlier copy of the replay:
			// one start, which this copy joins.
			f.Duplicates++
		case reclaims:
			f.Reclaims++
			seen[in.WorkflowID] = "reclaim"
		default: // a re-drive of a pending row
			f.Redrives++
			seen[in.WorkflowID] = "redrive"
		}
	}
	return nil
}
