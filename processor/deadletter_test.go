package processor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/processor/replay"
	"github.com/dedupio/dedup/schemas"
)

// limitDeadLetterTopic sets the dead-letter topic's max.message.bytes
// (kfake refuses a produce batch over it with MessageTooLarge, as a broker
// does).
func (e *testEnv) limitDeadLetterTopic(bytes int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v := strconv.Itoa(bytes)
	rs, err := e.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &v}}, testTopic+".dlq")
	if err == nil {
		_, err = rs.On(testTopic+".dlq", nil)
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// produceWithHeaders writes raw with n headers of size bytes each to
// partition p and returns its offset.
func (e *testEnv) produceWithHeaders(p int32, raw []byte, n, size int) int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kr := &kgo.Record{Topic: testTopic, Partition: p, Key: []byte("k"), Value: raw}
	for i := 0; i < n; i++ {
		v := make([]byte, size) // random: the producer's compression does not shrink it
		_, _ = rand.Read(v)
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: fmt.Sprintf("h-%d", i), Value: v})
	}
	r, err := e.cl.ProduceSync(ctx, kr).First()
	if err != nil {
		e.t.Fatal(err)
	}
	return r.Offset
}

func headerOf(kr *kgo.Record, key string) (string, bool) {
	for _, h := range kr.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// A record whose headers make its dead letter too large for the
// dead-letter topic (though the record fits its own topic) is still
// dead-lettered: without its value, key and headers, flagged with what was
// dropped, with its reason and coordinates; every partition commits to its
// end. (Before: the value alone was dropped, the topic refused the dead
// letter for ever, and the poll loop, which writes it, stalled every
// partition.)
func TestDeadLetterWithHeadersTooLargeForItsTopicIsWrittenSummarised(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	e.limitDeadLetterTopic(4096)
	e.produce(0, "a", "v")
	off := e.produceWithHeaders(0, []byte("not json"), 40, 200) // 8 KB of headers: fits events, not events.dlq
	e.produce(0, "b", "v")
	e.produce(1, "c", "v")
	rn := e.start("r1", e.config())
	e.waitCommittedToEnd(20 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	dls := e.dlqRecords()
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	dl := dls[0]
	want := map[string]string{schemas.HeaderDLQReason: string(decide.ReasonUndecodable), schemas.HeaderDLQTopic: testTopic,
		schemas.HeaderDLQPartition: "0", schemas.HeaderDLQOffset: strconv.FormatInt(off, 10),
		schemas.HeaderDLQValueDropped: "8", schemas.HeaderDLQKeyDropped: "1", schemas.HeaderDLQHeadersDropped: "40"}
	for k, v := range want {
		if got, ok := headerOf(dl, k); !ok || got != v {
			t.Errorf("dead letter header %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	if _, ok := headerOf(dl, "h-0"); ok || dl.Value != nil || dl.Key != nil {
		t.Errorf("dead letter keeps the original value %q, key %q or headers (%d headers)", dl.Value, dl.Key, len(dl.Headers))
	}
	for _, id := range []string{"a", "b", "c"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
}

// A record whose dead letter the dead-letter topic refuses even reduced to
// its reason and coordinates (max.message.bytes below that) stalls its own
// partition only: the router goes on polling, starts the records after it
// and commits the other partition to its end, and its partition's
// committed offset stays at the record, so a restart reads it again.
func TestDeadLetterThatNeverFitsStallsItsPartitionOnly(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	e.limitDeadLetterTopic(100)
	e.produce(0, "a", "v")
	off := e.produceRaw(0, []byte("not json"))
	e.produce(0, "b", "v")
	e.produce(1, "c", "v")
	rn := e.start("r1", e.config())
	eventually(t, 20*time.Second, func() bool {
		c := e.committed()
		return c[1] == e.ends()[1] && c[0] == off && len(e.starter.executionsOf(wid("b"))) == 1
	}, func() string {
		return fmt.Sprintf("committed %v (ends %v), b started %d times; want partition 1 at its end, partition 0 at %d",
			e.committed(), e.ends(), len(e.starter.executionsOf(wid("b"))), off)
	})
	// The bound: 300 ms of commit ticks (every 50 ms) and retries.
	stays(t, 300*time.Millisecond, func() bool { return e.committed()[0] == off },
		func() string {
			return fmt.Sprintf("committed %v past the record whose dead letter was never written", e.committed())
		})
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := len(e.dlq.recorded()); n != 0 {
		t.Errorf("dead-letter log holds %d entries, want none", n)
	}
}

// A record whose ID is its coordinates keeps that ID however often it is
// dead-lettered and replayed: the origin travels with every copy, so the
// whole dead-letter topic replayed round after round claims one workflow
// ID only. Also when the dead letters are summarised (the original's
// headers too large for the dead-letter topic) and replay reads each copy
// back from the source topic.
func TestReplayedCoordinatesEventKeepsItsIDOverRoundTrips(t *testing.T) {
	for _, summarised := range []bool{false, true} {
		t.Run(fmt.Sprintf("summarised=%v", summarised), func(t *testing.T) {
			e := newTestEnv(t, 1, envOpt{})
			cfg := e.config()
			cfg.EventID.Chain = []eventid.Rule{eventid.RuleCoordinates}
			raw := fmt.Appendf(nil, `{"type":%q,"data":{"v":1}}`, testType)
			var off int64
			if summarised {
				e.limitDeadLetterTopic(4096)
				off = e.produceWithHeaders(0, raw, 40, 200)
			} else {
				off = e.produceRaw(0, raw)
			}
			w := decide.WorkflowID(testRoute, fmt.Sprintf("%s/0/%d", testTopic, off))
			e.starter.failPermanent(w)
			rn := e.start("r1", cfg)
			e.waitCommittedToEnd(10 * time.Second)
			const rounds = 3
			for i := 0; i < rounds; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				res, err := replay.Run(ctx, replay.Options{Brokers: e.cluster.ListenAddrs(), IsolationLevel: replay.ReadCommitted, DeadLetterTopics: []string{testTopic + ".dlq"},
					Idle: time.Second, Execute: true}, testLogger("replay"))
				cancel()
				fromSource := res.FromSource[string(decide.ReasonTemporalPermanent)] == res.Replayed[string(decide.ReasonTemporalPermanent)]
				if err != nil || len(res.Refused) != 0 || res.Replayed[string(decide.ReasonTemporalPermanent)] == 0 || fromSource != summarised {
					t.Fatalf("replay %d: %v %+v", i+1, err, res)
				}
				e.waitCommittedToEnd(10 * time.Second)
			}
			if err := rn.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			claimed := map[string]int{}
			for _, batch := range e.led.claimLog() {
				for _, in := range batch {
					claimed[in.WorkflowID]++
				}
			}
			if len(claimed) != 1 || claimed[w] < rounds+1 {
				t.Errorf("claimed %v over %d replays of the dead-letter topic, want only %s, at least %d times", claimed, rounds, w, rounds+1)
			}
		})
	}
}

// produceRecord writes kr to the test topic as a producer would (its own
// headers, whatever their names) and returns its offset.
func (e *testEnv) produceRecord(kr *kgo.Record) int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kr.Topic = testTopic
	r, err := e.cl.ProduceSync(ctx, kr).First()
	if err != nil {
		e.t.Fatal(err)
	}
	return r.Offset
}

// The rule: a dead letter always fits a dead-letter topic that takes a
// kilobyte (deadLetterWriter's contract); the runbook says only a limit
// "below a few hundred bytes" refuses even the summary. The summary keeps
// the workflow ID whole and the error cut to 512 bytes, and the error
// names the workflow ID again: an event whose ID is as long as
// event_id.max_id_length allows (900, a valid setting; its workflow ID
// stays under Temporal's 1,000 bytes) has a summary over a kilobyte, so
// its partition stops committing. Fails today: partition 0 stays at the
// record.
func TestDeadLetterSummaryFitsATopicThatTakesAKilobyte(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	e.limitDeadLetterTopic(1024)
	cfg := e.config()
	cfg.EventID.MaxIDLength = 900
	b := make([]byte, 450)
	_, _ = rand.Read(b) // random: the producer's compression does not shrink it
	id := hex.EncodeToString(b)
	e.starter.failPermanent(wid(id))
	e.produce(0, id, "v")
	rn := e.start("r1", cfg)
	e.waitCommittedToEnd(20 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := e.dlqReasons(); got[string(decide.ReasonTemporalPermanent)] != 1 {
		t.Errorf("dead letters by reason %v, want one temporal_permanent", got)
	}
}

// The rule: a dead letter's dedup-topic, dedup-partition, dedup-offset
// and dedup-reason are the router's, whatever headers the original
// carried. A whole dead letter keeps the original's headers first and
// appends the router's; a record that carries its own dedup-topic (a
// producer's, or a dead letter copied back by hand with kcat) makes the
// replay read the original's header, not the router's: it sends the
// event to that topic (here audit, which the producer may not write and
// the router does not read) instead of back to events. Fails today: the
// replay writes to audit.
func TestDeadLetterOfARecordCarryingDedupHeadersIsReplayedToItsSourceTopic(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.adm.CreateTopic(ctx, 1, 1, nil, "audit"); err != nil {
		t.Fatal(err)
	}
	e.produceRecord(&kgo.Record{Value: []byte("not json"), Headers: []kgo.RecordHeader{
		{Key: schemas.HeaderDLQTopic, Value: []byte("audit")}, {Key: schemas.HeaderDLQPartition, Value: []byte("0")},
		{Key: schemas.HeaderDLQOffset, Value: []byte("0")}}})
	rn := e.start("r1", e.config())
	e.waitCommittedToEnd(20 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	res, err := replay.Run(ctx, replay.Options{Brokers: e.cluster.ListenAddrs(), IsolationLevel: replay.ReadCommitted, DeadLetterTopics: []string{testTopic + ".dlq"},
		Idle: time.Second, Execute: true}, testLogger("replay"))
	if err != nil || res.Replayed[string(decide.ReasonUndecodable)] != 1 {
		t.Fatalf("replay: %v %+v", err, res)
	}
	if got, want := e.endsOf("audit")[0], int64(0); got != want {
		t.Errorf("audit holds %d records after the replay, want %d: the event went to the topic its own header named", got, want)
	}
	if got := e.ends()[0]; got != 2 {
		t.Errorf("events ends at %d after the replay, want 2 (the original and its replayed copy)", got)
	}
}

// A dead letter reduced for its topic (its value dropped) keeps its
// source's key and headers exactly, and its dedup-original-sha256 is the
// digest of the source record as the client fetched it: a nil key, nil and
// empty header values and repeated header names as they were (nil stays
// nil, empty empty). Two records: a nil key and an empty one, 25 records
// apart, each with headers a=nil, b="", a="x" (adversary 34).
func TestAReducedDeadLetterCarriesItsSourceRecordAsFetched(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	e.limitDeadLetterTopic(4096)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hs := []kgo.RecordHeader{{Key: "a"}, {Key: "b", Value: []byte{}}, {Key: "a", Value: []byte("x")}}
	big := make([]byte, 6000) // random: the producer's compression does not shrink it
	_, _ = rand.Read(big)
	big = append([]byte("not json "), big...)
	var recs []*kgo.Record
	for i := range 40 {
		recs = append(recs, &kgo.Record{Topic: testTopic, Value: value(fmt.Sprintf("d%d", i), "v")})
	}
	recs[5] = &kgo.Record{Topic: testTopic, Key: nil, Value: big, Headers: hs}
	recs[30] = &kgo.Record{Topic: testTopic, Key: []byte{}, Value: big, Headers: hs}
	if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The sources as a plain client fetches them.
	cons, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.ListenAddrs()...), kgo.ConsumeTopics(testTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	src := map[string]*kgo.Record{}
	for n := 0; n < len(recs) && ctx.Err() == nil; {
		cons.PollFetches(ctx).EachRecord(func(kr *kgo.Record) {
			src[strconv.FormatInt(kr.Offset, 10)] = kr
			n++
		})
	}
	cons.Close()
	rn := e.start("r1", e.config())
	e.waitCommittedToEnd(20 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	dls := e.dlqRecords()
	if len(dls) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dls))
	}
	for _, dl := range dls {
		off, _ := headerOf(dl, schemas.HeaderDLQOffset)
		s := src[off]
		if s == nil {
			t.Fatalf("dead letter of offset %q: no such source", off)
		}
		if dropped, ok := headerOf(dl, schemas.HeaderDLQValueDropped); !ok || dropped != strconv.Itoa(len(big)) {
			t.Errorf("offset %s: value not dropped (%q, %v)", off, dropped, ok)
		}
		want := schemas.OriginalSHA256(s.Key, s.Value, headerSeq(s.Headers))
		if got, _ := headerOf(dl, schemas.HeaderDLQOriginalSHA256); got != want {
			t.Errorf("offset %s: dedup-original-sha256 %s, want %s (the source as fetched: key %q nil %v)", off, got, want, s.Key, s.Key == nil)
		}
		if (dl.Key == nil) != (s.Key == nil) || string(dl.Key) != string(s.Key) {
			t.Errorf("offset %s: key %q (nil %v), want %q (nil %v)", off, dl.Key, dl.Key == nil, s.Key, s.Key == nil)
		}
		var own []kgo.RecordHeader
		for _, h := range dl.Headers {
			if !slices.Contains(schemas.DeadLetterHeaders, h.Key) {
				own = append(own, h)
			}
		}
		if len(own) != len(s.Headers) {
			t.Fatalf("offset %s: headers %+v, want %+v", off, own, s.Headers)
		}
		for j, h := range own {
			if h.Key != s.Headers[j].Key || (h.Value == nil) != (s.Headers[j].Value == nil) || string(h.Value) != string(s.Headers[j].Value) {
				t.Errorf("offset %s: header %d %q=%q (nil %v), want %q=%q (nil %v)", off, j, h.Key, h.Value, h.Value == nil,
					s.Headers[j].Key, s.Headers[j].Value, s.Headers[j].Value == nil)
			}
		}
	}
}

// Adversary 50 (b/c): a router stopped while a dead letter's Produce is
// held by the broker returns within drain_timeout (the smallest Validate
// accepts), and commits nothing past the record whose dead letter was not
// acknowledged. The dead letter is written from the poll loop (prepare),
// under the poll's context: the stop cancels it, but a Produce already
// sent is the client's request, not the record's, and ProduceSync waits
// for its answer. Before offset 1 (a valid event, started) the record at
// offset 0 must be dead-lettered; the Produce to the dead-letter topic is
// held for 60 s (released at the end).
func TestAStopWhileADeadLetterIsProducedReturnsWithinTheSmallestDrainTimeout(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	hold := make(chan struct{})
	var holdOnce sync.Once
	release := func() { holdOnce.Do(func() { close(hold) }) }
	defer release()
	var armed, held atomic.Bool
	e.cluster.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		// Produce names topics by ID from v13 on: every Produce once
		// armed (after the test's own) is the router's dead letter.
		if armed.Load() && !held.Swap(true) {
			e.sleepControl(func() {
				select {
				case <-hold:
				case <-time.After(60 * time.Second):
				}
			})
		}
		return nil, nil, false
	})
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	e.produceRaw(0, []byte("not json"))
	e.produce(0, "a", "v")
	armed.Store(true)
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, held.Load, func() string { return "the dead letter's Produce never reached the broker" })
	time.Sleep(50 * time.Millisecond)
	err := rn.stop()
	if rn.took > cfg.DrainTimeout+2*time.Second {
		t.Errorf("Run returned %v after a stop while a dead letter's Produce was held; want within drain_timeout (%v) + 2s", rn.took, cfg.DrainTimeout)
	}
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	if c := e.committed()[0]; c > 0 && len(e.dlq.recorded()) == 0 {
		t.Errorf("committed %d with no dead letter recorded for offset 0", c)
	}
	release()
}

// Adversary 50 (c, worker side): a router stopped while a start pool
// worker writes the dead letter of a start Temporal refused for good
// (temporal_permanent), its Produce held by the broker, returns within
// drain_timeout (the smallest Validate accepts). The worker's put runs
// under the record's partition context, which the drain cancels; but a
// Produce already sent is the client's request and ProduceSync waits for
// it, and stopStarts waits for every worker before the final commit.
func TestAStopWhileAWorkerWritesADeadLetterReturnsWithinTheSmallestDrainTimeout(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	hold := make(chan struct{})
	var holdOnce sync.Once
	release := func() { holdOnce.Do(func() { close(hold) }) }
	defer release()
	var armed, held atomic.Bool
	e.cluster.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if armed.Load() && !held.Swap(true) { // Produce v13 names topics by ID: every Produce once armed is the router's
			e.sleepControl(func() {
				select {
				case <-hold:
				case <-time.After(60 * time.Second):
				}
			})
		}
		return nil, nil, false
	})
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	e.starter.failPermanent(wid("p"))
	e.produce(0, "p", "v")
	armed.Store(true)
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, held.Load, func() string { return "the dead letter's Produce never reached the broker" })
	time.Sleep(50 * time.Millisecond)
	err := rn.stop()
	if rn.took > cfg.DrainTimeout+2*time.Second {
		t.Errorf("Run returned %v after a stop while a worker's dead letter Produce was held; want within drain_timeout (%v) + 2s", rn.took, cfg.DrainTimeout)
	}
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	release()
}

// Adversary 50d (b, claimer conflict path; holds): a router stopped while
// the dead letter of a conflict (the same workflow ID claimed with another
// payload, written by the claimer under the poll's context) is held by the
// broker returns within drain_timeout, and neither commits past the
// conflicting record nor records its dead letter as written: produceSync
// returning at the stop fails the record, it does not end it ok.
func TestAStopWhileAConflictsDeadLetterIsHeldCommitsNothingPastIt(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	arm, held, release := e.holdKeyOnce(kmsg.Produce.Int16())
	defer release()
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	e.produce(0, "x", "v1")
	e.produce(0, "x", "v2") // offset 1: a conflict
	arm()                   // every Produce from now on is the router's: its dead letters
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, held.Load, func() string { return "the conflict's dead letter Produce never reached the broker" })
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("x")) == stateStarted }, func() string { return "x/v1 not started" })
	time.Sleep(50 * time.Millisecond)
	err := rn.stop()
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after the stop; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	c := e.committed()[0]
	rec := e.dlq.recorded()
	t.Logf("Run took %v; committed %d; dead letters recorded %d", rn.took, c, len(rec))
	if c > 1 {
		t.Errorf("committed %d past the conflict at offset 1 whose dead letter the broker never acknowledged", c)
	}
	if len(rec) != 0 {
		t.Errorf("dead letter recorded as written though its Produce was not acknowledged: %+v", rec)
	}
	release()
}

// A dead letter carries its own copy of its record's key, value and
// headers at every reduction: a Produce its context gave up on may still
// be sent after the record ended and its memory went back to the fetch
// pools, which lend it to the next fetch.
func TestADeadLetterCarriesItsOwnCopyOfItsRecordsKeyValueAndHeaders(t *testing.T) {
	for _, level := range []reduction{whole, noValue, summarised} {
		src := &kgo.Record{Topic: testTopic, Partition: 1, Offset: 7, Key: []byte("the key"), Value: []byte("{not json"),
			Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("a header")}, {Key: schemas.HeaderOriginTopic, Value: []byte("origin")}}}
		o := &outgoing{d: &deadLetter{rec: &record{kr: src}, reason: decide.ReasonUndecodable, err: fmt.Errorf("bad")},
			topic: testTopic + ".dlq", level: level}
		kr := o.kafkaRecord()
		want := &kgo.Record{Key: slices.Clone(kr.Key), Value: slices.Clone(kr.Value)}
		for _, h := range kr.Headers {
			want.Headers = append(want.Headers, kgo.RecordHeader{Key: h.Key, Value: slices.Clone(h.Value)})
		}
		for _, b := range append([][]byte{src.Key, src.Value}, src.Headers[0].Value, src.Headers[1].Value) {
			for i := range b { // the pools lend the record's memory to the next fetch
				b[i] = 'X'
			}
		}
		if !slices.Equal(kr.Key, want.Key) || !slices.Equal(kr.Value, want.Value) ||
			!slices.EqualFunc(kr.Headers, want.Headers, func(a, b kgo.RecordHeader) bool { return a.Key == b.Key && slices.Equal(a.Value, b.Value) }) {
			t.Fatalf("reduction %d: the dead letter changed with its record: key %q value %q headers %q, was %q %q %q",
				level, kr.Key, kr.Value, kr.Headers, want.Key, want.Value, want.Headers)
		}
	}
}
