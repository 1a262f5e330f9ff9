package processor

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Adversary 51d: under kafka.reset_offset latest a gap's lost records are
// counted as the whole range [from, to), to being the first offset polled
// after the reset. Offsets written after the reset that read_committed
// never hands over (an aborted transaction's records) lie between the
// reset point and to: they were neither deleted nor skipped by the reset,
// yet are counted lost. Committed at 3, 3..7 produced, 3..5 deleted by
// retention, the reset lands at 8 (the log end, seen as a fetch from 8);
// then an aborted transaction writes 8 (its record) and 9 (the abort
// marker), and i lands at 10. The reset skipped 3..7: five records.
func TestAResetToLatestDoesNotCountAnAbortedTransactionAfterTheResetAsLost(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	for _, id := range []string{"a", "b", "c"} {
		e.produce(0, id, "v")
	}
	cfg := e.config()
	cfg.ResetOffset = "latest"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var os kadm.Offsets
	os.AddOffset(testTopic, 0, 3, -1)
	resp, err := e.adm.CommitOffsets(ctx, e.group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"d", "e", "f", "g", "h"} { // offsets 3..7
		e.produce(0, id, "v")
	}
	if _, err := e.adm.DeleteRecords(ctx, kadm.Offsets{testTopic: {0: {Topic: testTopic, Partition: 0, At: 6}}}); err != nil {
		t.Fatal(err)
	}
	at8 := make(chan struct{})
	var at8Once sync.Once
	e.cluster.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		for _, tp := range req.(*kmsg.FetchRequest).Topics {
			for _, p := range tp.Partitions {
				if p.FetchOffset == 8 {
					at8Once.Do(func() { close(at8) })
				}
			}
		}
		return nil, nil, false
	})
	rn := e.start("r2", cfg)
	select {
	case <-at8:
	case <-time.After(10 * time.Second):
		t.Fatal("the router never fetched from 8 (the log end)")
	}
	tx := e.txProducer("adv51d-abort")
	tx.begin(txEvent{0, "aborted"}) // offset 8, never handed over by read_committed
	tx.end(false)                   // offset 9: the abort marker
	if off := e.produce(0, "i", "v"); off != 10 {
		t.Fatalf("i at offset %d, the scenario wants 10", off)
	}
	eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid("i")) == 1 }, func() string { return "i not started" })
	e.waitCommittedToEnd(10 * time.Second)
	stays(t, 3*cfg.LagInterval, func() bool { return lostOf(t, rn) == 5 }, func() string {
		return fmt.Sprintf("dedup_records_lost_total %v, want 5: the reset to latest skipped offsets 3..7; 8 (an aborted transaction's record) and 9 (its marker) were written after the reset and are not lost", lostOf(t, rn))
	})
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
