package integration

import (
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.yaml.in/yaml/v3"

	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/processor/schedule"
)

// exprs returns every PromQL expression of the routers in the dashboard
// and the rule file, failing the test if either does not parse as JSON or
// YAML of the expected shape. The worker row's queries (job=~"$worker_job")
// are the worker's (`dedup worker`, its own admin port), not the router's:
// they are left out.
func exprs(t *testing.T) (map[string]string, map[string]bool) {
	t.Helper()
	out := map[string]string{}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err := os.ReadFile("../deploy/grafana/dashboards/dedup.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	if dash.UID == "" || len(dash.Panels) < 8 {
		t.Fatalf("dashboard has uid %q and %d panels", dash.UID, len(dash.Panels))
	}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, "$worker_job") {
				out["dashboard/"+p.Title+": "+tg.Expr] = tg.Expr
			}
		}
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Record string            `yaml:"record"`
				Alert  string            `yaml:"alert"`
				Expr   string            `yaml:"expr"`
				For    string            `yaml:"for"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err = os.ReadFile("../deploy/prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(false)
	if err := dec.Decode(&rules); err != nil {
		t.Fatalf("rules: %v", err)
	}
	recorded := map[string]bool{}
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Expr == "" || (r.Record == "") == (r.Alert == "") {
				t.Errorf("rule %+v: want an expr and exactly one of record/alert", r)
			}
			if r.Record != "" {
				recorded[r.Record] = true
			}
			if r.Alert != "" {
				alerts++
				if r.Labels["severity"] == "" {
					t.Errorf("alert %s has no severity", r.Alert)
				}
				if r.For != "" {
					if _, err := time.ParseDuration(r.For); err != nil {
						t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
					}
				}
			}
			out["rules/"+r.Record+r.Alert] = r.Expr
		}
	}
	if alerts < 6 {
		t.Errorf("%d alerts, want the issue's six at least", alerts)
	}
	return out, recorded
}

var metricName = regexp.MustCompile(`\b((?:dedup|kafka|temporal|go|process)_[a-zA-Z0-9_]+)\b`)

// A running router and ingress export every metric the dashboard and the
// rules use.
func TestDashboardAndRulesUseExportedMetrics(t *testing.T) {
	e := newEnv(t, 2)
	w := workload.Generate(workload.Spec{Topic: e.topic, Partitions: 2, Records: 200, DupRatio: 0.3, Seed: 5, IDPrefix: "ops-"})
	w.Records = append(w.Records, &kgo.Record{Value: []byte("garbage")})
	e.produce(w)
	cfg := e.config()
	cfg.Kafka.LagInterval = 200 * time.Millisecond
	// A per-second trigger: the scheduler's series are exported too.
	cfg.Schedules = schedConfig(schedule.Skip)
	cfg.Schedules.Triggers[0].Cron = "* * * * * *"
	r := e.startRouter(cfg)
	e.waitCommitted(time.Minute)
	time.Sleep(time.Second) // one lag measurement after the commits
	// The schedule's lag is set by this replica's first start of a fire:
	// the per-second trigger's first slot comes a tick after the tick that
	// creates its cursor, which a busy machine can put after the commits and
	// the second above (CI, 2026-12-07). The consumer lag is set by a
	// measurement. Wait for both rather than for a time.
	waited := time.Now()
	if !eventually(30*time.Second, func() bool {
		mfs, err := r.reg.Gather()
		n := 0
		for _, mf := range mfs {
			if mf.GetName() == "dedup_schedule_lag_seconds" || mf.GetName() == "dedup_consumer_lag" {
				n++
			}
		}
		return n == 2 || err != nil
	}) {
		t.Error("no schedule start or no lag measurement in 30 s: dedup_schedule_lag_seconds is set by a start, dedup_consumer_lag by a measurement")
	}
	t.Logf("the schedule's first start and a lag measurement came %v after the commits and a second", time.Since(waited).Round(time.Millisecond))
	mfs, err := r.reg.Gather()
	r.stop(t)
	if err != nil {
		t.Fatal(err)
	}
	// The ingress's own series (the dashboard's ingress row, its alert),
	// once it has answered a request.
	in := e.startIngress(cfg, nil)
	req, _ := http.NewRequest("POST", in.url+"/v1/events", strings.NewReader(`{"type":"order.created","total":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", `"ops-metrics-1"`)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /v1/events: %d", res.StatusCode)
	}
	imfs, err := in.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, mf := range append(mfs, imfs...) {
		exported[mf.GetName()] = true
	}
	// The Temporal SDK's failure counter (beside temporal_request_total,
	// which a healthy run exports) appears at its first failed request:
	// DedupSignalsRefusedByRunLimit reads it, and rules_test.yml holds the
	// alert on its series.
	exported["temporal_request_failure_total"] = true
	all, recorded := exprs(t)
	used := map[string]bool{}
	for where, expr := range all {
		for _, m := range metricName.FindAllString(expr, -1) {
			base := m
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if strings.HasSuffix(m, suf) && exported[strings.TrimSuffix(m, suf)] {
					base = strings.TrimSuffix(m, suf)
				}
			}
			used[base] = true
			if !exported[base] {
				t.Errorf("%s uses %s, which neither the router nor the ingress exports", where, m)
			}
		}
		for _, rec := range regexp.MustCompile(`\bdedup:[a-z0-9_:]+`).FindAllString(expr, -1) {
			if !recorded[rec] {
				t.Errorf("%s uses %s, which no recording rule defines", where, rec)
			}
		}
	}
	t.Logf("%d metrics used by the dashboard and rules, all exported; %d exported in all", len(used), len(exported))
	if testing.Verbose() {
		for n := range exported {
			t.Log("exported: " + n)
		}
	}
	for _, must := range []string{"dedup_build_info", "dedup_consumer_lag", "kafka_fetch_bytes_total", "temporal_request_total", "go_goroutines", "process_resident_memory_bytes",
		"dedup_schedule_fires_total", "dedup_schedule_last_fire_timestamp_seconds", "dedup_schedule_interval_seconds", "dedup_schedule_paused", "dedup_schedule_lag_seconds"} {
		if !exported[must] {
			t.Errorf("%s not exported", must)
		}
	}
}
