package processor

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// New must finish wiring the router before the group can call it back.
// kgo.NewClient joins the group at once (ConsumeTopics), and the
// committer's assigned callback reads committer.adm (and commit reads
// committer.cl), which New sets only after NewClient returned
// (in New): an unsynchronised write/read, and a nil
// *kadm.Client dereference (a panic in kgo's goroutine) whenever the
// assignment comes first. The race detector sees it in most of these
// rounds; without -race the test only fails if the panic happens.
func TestNewWiresTheRouterBeforeJoining(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	for i := 0; i < 10; i++ {
		r, err := New(e.config(), Options{Ledger: e.led, DeadLetterLog: e.dlq, Starter: e.starter, Registerer: prometheus.NewRegistry(),
			Log: testLogger("r"), KafkaOpts: []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, r.commits.ready, func() string { return "never joined" })
		r.cl.Close()
		r.workCancel()
	}
}
