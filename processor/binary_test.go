package processor

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Issue #15: CloudEvents binary-mode records whose data is not JSON (the
// issue's ce_datacontenttype: text/plain, and Protobuf bytes in the Kafka
// binding's content-type header) start their workflows with the bytes
// intact in the workflow input; a tombstone is skipped and counted, not
// dead-lettered; every offset is committed.
func TestBinaryDataStartsAndTombstonesAreSkipped(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	proto := []byte{0x08, 0x96, 0x01, 0x12, 0x07, 't', 'e', 's', 't', 'i', 'n', 'g', 0x1a, 0x02, 0x00, 0xff}
	ce := func(id string, extra ...string) []kgo.RecordHeader {
		kv := append([]string{"ce_specversion", "1.0", "ce_id", id, "ce_type", testType, "ce_source", "shop"}, extra...)
		var hs []kgo.RecordHeader
		for i := 0; i+1 < len(kv); i += 2 {
			hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return hs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs := []*kgo.Record{
		{Topic: testTopic, Value: []byte("hello, world"), Headers: ce("text-1", "ce_datacontenttype", "text/plain")},
		{Topic: testTopic, Key: []byte("k"), Value: nil}, // a tombstone
		{Topic: testTopic, Value: proto, Headers: ce("proto-1", "content-type", "application/protobuf")},
		{Topic: testTopic, Value: []byte("hello, world"), Headers: ce("text-1", "ce_datacontenttype", "text/plain")}, // a duplicate
	}
	if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r, err := New(e.config(), Options{Ledger: e.led, DeadLetterLog: e.dlq, Starter: e.starter.as("r1"), Registerer: reg, Log: testLogger("r1"),
		KafkaOpts: []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	e.waitCommittedToEnd(10 * time.Second)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]struct {
		data []byte
		ct   string
	}{"text-1": {[]byte("hello, world"), "text/plain"}, "proto-1": {proto, "application/protobuf"}} {
		ex := e.starter.executionsOf(wid(id))
		if len(ex) != 1 {
			t.Fatalf("%s: %d executions, want 1", id, len(ex))
		}
		in := ex[0].req.Input
		if !bytes.Equal(in.DataBase64, want.data) || in.DataContentType != want.ct || string(in.Data) != "null" {
			t.Errorf("%s: input data %s, data_base64 %q, content type %q; want null, %q, %q", id, in.Data, in.DataBase64, in.DataContentType, want.data, want.ct)
		}
		// What the workflow receives, as JSON: base64 with its content type.
		b, _ := json.Marshal(in)
		var back struct {
			DataBase64      []byte `json:"data_base64"`
			DataContentType string `json:"datacontenttype"`
		}
		if err := json.Unmarshal(b, &back); err != nil || !bytes.Equal(back.DataBase64, want.data) || back.DataContentType != want.ct {
			t.Errorf("%s: workflow input JSON %s does not carry the bytes back (%v)", id, b, err)
		}
	}
	if got := gathered(t, reg, "dedup_records_tombstone_total"); got != 1 {
		t.Errorf("dedup_records_tombstone_total = %v, want 1", got)
	}
	if dl := e.dlq.recorded(); len(dl) != 0 {
		t.Errorf("dead letters: %+v", dl)
	}
	if n := len(e.starter.executionCounts()); n != 2 {
		t.Errorf("%d workflows, want 2", n)
	}
}

// gathered is the value of an unlabelled counter in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}
