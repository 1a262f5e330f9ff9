package app

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/dedupio/dedup/processor"
)

// forever stands for "kept forever" (retention.ms -1, postgres.retention 0).
const forever = time.Duration(math.MaxInt64)

// Horizon is what decides whether a replay from a topic's log start can
// start a workflow a second time: how long the ledger remembers a started
// workflow ID, how long Temporal keeps a closed run (and so, under
// reject_duplicate, refuses its ID), and how far back each topic's log
// reaches.
type Horizon struct {
	Ledger    time.Duration            // postgres.retention; forever when 0
	Namespace time.Duration            // the namespace's workflow execution retention
	Topics    map[string]time.Duration // retention.ms per source topic; forever when -1
	// OnlyLedger is set when a route's reuse policy lets Temporal start a
	// closed ID again (allow_*): then only the ledger guards replays.
	OnlyLedger bool
}

// Check says, naming the settings, how a replay from a log start could
// re-open duplicates; nil when it cannot.
func (h Horizon) Check() error {
	guard, by := h.Ledger, "postgres.retention"
	if !h.OnlyLedger && h.Namespace > guard {
		guard, by = h.Namespace, "the Temporal namespace retention"
	}
	if guard == forever {
		return nil
	}
	topics := make([]string, 0, len(h.Topics))
	for t := range h.Topics {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	var short []string
	for _, t := range topics {
		if r := h.Topics[t]; r > guard {
			short = append(short, fmt.Sprintf("%s (retention.ms %s)", t, span(r)))
		}
	}
	if len(short) == 0 {
		return nil
	}
	why := ""
	if h.OnlyLedger {
		why = " (a route uses an allow_* reuse policy, so Temporal does not refuse a closed ID)"
	}
	return fmt.Errorf("postgres.retention: events older than %s (%s%s) are forgotten, but topics %s keep them longer: "+
		"replaying from the log start would start their workflows again; set postgres.retention to 0 or at least the topics' retention, "+
		"or accept it with postgres.accept_short_horizon: true", span(guard), by, why, strings.Join(short, ", "))
}

// routeNamespaces are the namespaces the routes start workflows in, in
// route order, each once.
func routeNamespaces(cfg Config) []string {
	var out []string
	for _, rt := range cfg.Routes {
		ns := rt.Namespace
		if ns == "" {
			ns = cfg.Temporal.Namespace
		}
		if !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out
}

func span(d time.Duration) string {
	if d == forever {
		return "forever"
	}
	return d.String()
}

// checkHorizon reads the namespace's and the topics' retention and checks
// the horizon at start. It only asks when the ledger purges (postgres.
// retention > 0) and the operator has not accepted a short horizon. What
// cannot be read is logged, not fatal: dedup starts while Temporal or
// Kafka is down.
func checkHorizon(ctx context.Context, cfg Config, tc client.Client, log *slog.Logger, kopts ...kgo.Opt) error {
	if cfg.Postgres.Retention == 0 || cfg.Postgres.AcceptShortHorizon {
		return nil
	}
	h := Horizon{Ledger: cfg.Postgres.Retention, Topics: map[string]time.Duration{}}
	for _, rt := range cfg.Routes {
		if rt.IDReusePolicy != processor.ReuseRejectDuplicate {
			h.OnlyLedger = true
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// Every route's namespace: the one that forgets first decides.
	h.Namespace = forever
	for _, name := range routeNamespaces(cfg) {
		ns, err := tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: name})
		if err != nil {
			log.Warn("cannot read the namespace retention; the replay horizon is not checked", "namespace", name, "err", err)
			return nil
		}
		h.Namespace = min(h.Namespace, ns.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration())
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return fmt.Errorf("creating kafka admin client: %w", err)
	}
	defer cl.Close()
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, cfg.Kafka.Topics...)
	if err != nil {
		log.Warn("cannot read the topics' retention; the replay horizon is not checked", "err", err)
		return nil
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			log.Warn("cannot read a topic's retention; the replay horizon is not checked for it", "topic", rc.Name, "err", rc.Err)
			continue
		}
		for _, c := range rc.Configs {
			if c.Key != "retention.ms" {
				continue
			}
			ms, err := strconv.ParseInt(c.MaybeValue(), 10, 64)
			switch {
			case err != nil:
				log.Warn("unreadable retention.ms", "topic", rc.Name, "value", c.MaybeValue())
			case ms < 0:
				h.Topics[rc.Name] = forever
			default:
				h.Topics[rc.Name] = time.Duration(ms) * time.Millisecond
			}
		}
	}
	return h.Check()
}
