package ledger

import (
	"cmp"
	"slices"
	"strings"

	"github.com/dedupio/dedup/processor/decide"
)

// A partition's records in a batch are read as a run (startedByRangeSQL)
// when there are at least minRunRecords of them and their offsets span at
// most runSpan times as many offsets: a poll's records, consecutive but
// for the offsets of records that claim nothing (no route, a dead letter
// before the claim) and of transaction markers. The scan then reads at
// most runSpan times the run's records' rows; a batch of scattered records
// (a claim of IDs in random order) has no run and is read by startedSQL,
// one look-up an ID.
const (
	minRunRecords = 16
	runSpan       = 2
)

// maxRoutesByRecord bounds the IDs of one record that the replay's read
// looks up by their record: each of them reads the record's rows until it
// meets its own (the routes squared, a record). The IDs of a record with
// more routes in the batch are looked up by key alone, as a claim without
// a record.
const maxRoutesByRecord = 4

// recordRef is the record an intent came from.
type recordRef struct {
	topic     string
	partition int32
	offset    int64
}

func recordOf(in *decide.Intent) recordRef { return recordRef{in.Topic, in.Partition, in.Offset} }

// run is a partition's records in a batch read by one scan
// (startedByRangeSQL): from offset first to last.
type run struct {
	topic       string
	partition   int32
	first, last int64
	records     int
}

// partitionRef is a topic's partition.
type partitionRef struct {
	topic     string
	partition int32
}

// batchRuns are a batch's runs, and the number (from 1) of each
// partition's, if it has one.
type batchRuns struct {
	list []run
	num  map[partitionRef]int64
}

// of is the number of the run of the records of topic and partition, 0
// when they are not read as a run.
func (r batchRuns) of(topic string, partition int32) int64 {
	if len(r.list) == 0 {
		return 0
	}
	return r.num[partitionRef{topic, partition}]
}

// readPlan is how the read of started rows looks up each ID of uniq: by
// its run (runOf[j], from 1; 0 for none), else by its record (byRecord[j])
// or by its key alone; and the runs, in partition order. A batch whose
// records of each partition come in offset order, as a router's polls
// do, is counted in one pass in its order (runsInOrder: a map look-up a
// change of partition, where counting by record took two an ID, about
// 4% of a replay's CPU); any other by record (readPlanByRecord). Both
// give the same plan (TestTheReadPlanInOffsetOrderIsTheReadPlanByRecord).
func (s *claimScratch) readPlan(intents []decide.Intent, uniq []int) (runs []run, runOf []int64, byRecord []bool) {
	runs, ok := s.runsInOrder(intents, uniq)
	if !ok {
		return s.readPlanByRecord(intents, uniq)
	}
	runOf, byRecord = s.runOfOf(len(uniq)), s.byRecordOf(len(uniq))
	// The routes of a record no run reads: its partition is no run's,
	// so all its IDs are counted here.
	routes, some := s.routes, false
	for j, i := range uniq {
		in := &intents[i]
		if in.Topic != "" {
			runOf[j] = s.partRun[s.partOf[i]]
		}
		if runOf[j] == 0 {
			routes[recordOf(in)]++
			some = true
		}
	}
	if some {
		for j, i := range uniq {
			byRecord[j] = runOf[j] == 0 && routes[recordOf(&intents[i])] <= maxRoutesByRecord
		}
	}
	return runs, runOf, byRecord
}

// readPlanByRecord is readPlan for any batch: each ID's record counted
// in a map.
func (s *claimScratch) readPlanByRecord(intents []decide.Intent, uniq []int) (runs []run, runOf []int64, byRecord []bool) {
	routes := s.routes
	for _, i := range uniq {
		routes[recordOf(&intents[i])]++
	}
	br := s.runsOf(routes)
	runOf, byRecord = s.runOfOf(len(uniq)), s.byRecordOf(len(uniq))
	for j, i := range uniq {
		in := &intents[i]
		if in.Topic != "" {
			runOf[j] = br.of(in.Topic, in.Partition)
		}
		byRecord[j] = runOf[j] == 0 && routes[recordOf(in)] <= maxRoutesByRecord
	}
	return br.list, runOf, byRecord
}

// runsInOrder is runsOf for a batch whose IDs of uniq with a topic come,
// in the batch's order, partition by partition in offset order (the
// partitions may interleave, and a record's IDs need not be next to each
// other, but no partition's offsets go back): its partitions' records
// counted in one pass, where an offset above the partition's last is a
// new record. partOf (by intent) is each ID's partition in s.runs, and
// partRun (by partition) its run, 0 for none. ok is false, and s as
// before, for a batch whose offsets go back.
func (s *claimScratch) runsInOrder(intents []decide.Intent, uniq []int) (kept []run, ok bool) {
	s.inUniq = zeroed(s.inUniq, len(intents))
	for _, i := range uniq {
		s.inUniq[i] = true
	}
	s.partOf = zeroed(s.partOf, len(intents))
	parts := s.runs[:0]
	cur := -1
	for i := range intents {
		in := &intents[i]
		if !s.inUniq[i] || in.Topic == "" {
			continue
		}
		if cur < 0 || parts[cur].partition != in.Partition || parts[cur].topic != in.Topic {
			p := partitionRef{in.Topic, in.Partition}
			k, found := s.runNum[p]
			if !found {
				parts = append(parts, run{topic: in.Topic, partition: in.Partition, first: in.Offset, last: in.Offset, records: 1})
				k = int64(len(parts))
				s.runNum[p] = k
			}
			cur = int(k - 1)
		}
		r := &parts[cur]
		switch {
		case in.Offset > r.last:
			r.last = in.Offset
			r.records++
		case in.Offset < r.last:
			clear(s.runNum)
			clear(parts)
			s.runs = parts[:0]
			return nil, false
		}
		s.partOf[i] = int32(cur)
	}
	s.runs = parts
	clear(s.runNum)
	// Keep the runs that are runs, numbered in partition order, as
	// runsOf does.
	s.order = s.order[:0]
	for k := range parts {
		s.order = append(s.order, k)
	}
	slices.SortFunc(s.order, func(a, b int) int {
		return cmp.Or(strings.Compare(parts[a].topic, parts[b].topic), cmp.Compare(parts[a].partition, parts[b].partition))
	})
	s.partRun = zeroed(s.partRun, len(parts))
	kept = s.kept[:0]
	for _, k := range s.order {
		if r := parts[k]; r.records >= minRunRecords && uint64(r.last)-uint64(r.first) < uint64(runSpan*r.records) {
			kept = append(kept, r)
			s.partRun[k] = int64(len(kept))
		}
	}
	s.kept = kept
	return kept, true
}

// runsOf are the runs of the batch whose records (with a topic) routes
// counts: each partition's records, one run, when there are at least
// minRunRecords of them and they span at most runSpan times as many
// offsets.
func (s *claimScratch) runsOf(routes map[recordRef]int) batchRuns {
	runs := s.runs[:0]
	for rec := range routes {
		if rec.topic == "" {
			continue
		}
		p := partitionRef{rec.topic, rec.partition}
		k, ok := s.runNum[p]
		if !ok {
			runs = append(runs, run{topic: rec.topic, partition: rec.partition, first: rec.offset, last: rec.offset})
			k = int64(len(runs))
			s.runNum[p] = k
		}
		r := &runs[k-1]
		r.first, r.last = min(r.first, rec.offset), max(r.last, rec.offset)
		r.records++
	}
	// Keep the runs that are runs, numbered anew in partition order.
	kept := runs[:0]
	slices.SortFunc(runs, func(a, b run) int {
		return cmp.Or(strings.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	clear(s.runNum)
	for _, r := range runs {
		if r.records >= minRunRecords && uint64(r.last)-uint64(r.first) < uint64(runSpan*r.records) {
			kept = append(kept, r)
			s.runNum[partitionRef{r.topic, r.partition}] = int64(len(kept))
		}
	}
	s.runs = kept
	return batchRuns{list: kept, num: s.runNum}
}
