package processor

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// Adversary 50d (d/lag client): internal/app hands the router
// kgo.WithHooks(kprom.NewMetrics(...)) in Options.KafkaOpts, as
// Options.KafkaOpts' own doc suggests ("kprom hooks"). The lag watch's own
// client is made from the same options, so kprom's OnNewClient runs a
// second time on the same Metrics and registry. The router must keep
// running (no panic in the lag goroutine) and kprom's kafka_* metrics must
// still be exported after the lag client closes (OnClientClosed
// unregisters them).
//
// The router runs in a child process so that a panic in one of its
// goroutines fails this test rather than the whole package.
func TestARouterWithKpromHooksInKafkaOptsKeepsRunningAndExportsKafkaMetrics(t *testing.T) {
	if os.Getenv("ADV50D_KPROM_CHILD") == "1" {
		kpromChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestARouterWithKpromHooksInKafkaOptsKeepsRunningAndExportsKafkaMetrics$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "ADV50D_KPROM_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		lines := strings.Split(string(out), "\n")
		var keep []string
		for _, l := range lines {
			if strings.Contains(l, "panic") || strings.Contains(l, "adversary50d") || strings.Contains(l, "FAIL") || strings.Contains(l, "lag") {
				keep = append(keep, l)
			}
			if len(keep) > 25 {
				break
			}
		}
		t.Fatalf("the router with kprom hooks in KafkaOpts (as internal/app runs it) did not keep running: %v\n%s", err, strings.Join(keep, "\n"))
	}
}

func kpromChild(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	cfg := e.config()
	reg := prometheus.NewRegistry()
	km := kprom.NewMetrics("kafka", kprom.Registerer(reg), kprom.Gatherer(reg))
	r, err := New(cfg, Options{Ledger: e.led, DeadLetterLog: e.dlq, Starter: e.starter.as("r"), Registerer: reg, Log: testLogger("r"),
		KafkaOpts: []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond), kgo.WithHooks(km)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	e.produce(0, "a", "v")
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("a")) == stateStarted },
		func() string { return "a never started" })
	time.Sleep(5 * cfg.LagInterval)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var kafka, lag bool
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "kafka_") {
			kafka = true
		}
		if mf.GetName() == "dedup_consumer_lag" {
			lag = true
		}
	}
	if !kafka {
		t.Errorf("no kafka_* (kprom) metric in the registry while the router runs")
	}
	if !lag {
		t.Errorf("no dedup_consumer_lag in the registry while the router runs")
	}
}
