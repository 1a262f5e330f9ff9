package dial

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/sink/ledger"
)

// routeNamespaces are the namespaces the routes start workflows in, in
// route order, each once.
func routeNamespaces(cfg config.Config) []string {
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

// CheckHorizon reads the namespaces' and the topics' retention and checks
// the horizon at start. It only asks when the ledger purges (postgres.
// retention > 0) and the operator has not accepted a short horizon. What
// cannot be read is logged, not fatal: dedup starts while Temporal or
// Kafka is down.
func CheckHorizon(ctx context.Context, cfg config.Config, tc client.Client, log *slog.Logger, kopts ...kgo.Opt) error {
	if cfg.Postgres.Retention == 0 || cfg.Postgres.AcceptShortHorizon {
		return nil
	}
	h := ledger.Horizon{Ledger: cfg.Postgres.Retention, OnlyLedger: onlyLedger(cfg)}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ns, err := NamespaceRetention(ctx, cfg, tc)
	if err != nil {
		log.Warn("cannot read the namespace retention; the replay horizon is not checked", "err", err)
		return nil
	}
	h.Namespace = ns
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return fmt.Errorf("creating kafka admin client: %w", err)
	}
	defer cl.Close()
	topics, unread, err := topicRetentions(ctx, kadm.NewClient(cl), cfg.Kafka.Topics)
	if err != nil {
		log.Warn("cannot read the topics' retention; the replay horizon is not checked", "err", err)
		return nil
	}
	for t, err := range unread {
		log.Warn("cannot read a topic's retention; the replay horizon is not checked for it", "topic", t, "err", err)
	}
	h.Topics = topics
	return h.Check()
}

// ReadHorizon is cfg's horizon were the ledger to remember ledgerMemory
// (postgres.retention, or what a manual purge would keep): the namespaces'
// and the topics' retention as Temporal and Kafka tell them now. Unlike
// the check at start, it fails when any of it cannot be read: its callers
// are about to forget rows (dedup ledger purge), which is only safe on a
// complete answer.
func ReadHorizon(ctx context.Context, cfg config.Config, ledgerMemory time.Duration, tc client.Client, adm *kadm.Client) (ledger.Horizon, error) {
	h := ledger.Horizon{Ledger: ledgerMemory, OnlyLedger: onlyLedger(cfg)}
	if h.Ledger == 0 {
		h.Ledger = ledger.Forever
	}
	ns, err := NamespaceRetention(ctx, cfg, tc)
	if err != nil {
		return h, err
	}
	h.Namespace = ns
	topics, unread, err := topicRetentions(ctx, adm, cfg.Kafka.Topics)
	if err != nil {
		return h, fmt.Errorf("reading the topics' retention.ms and segment.ms: %w", err)
	}
	for t, err := range unread {
		return h, fmt.Errorf("reading the retention of topic %s: %w", t, err)
	}
	h.Topics = topics
	return h, nil
}

// onlyLedger says whether a route's repeats only the ledger refuses for
// good (config.LedgerOnlyRoutes: an allow_* reuse policy, a signal route).
func onlyLedger(cfg config.Config) bool { return len(config.LedgerOnlyRoutes(cfg)) > 0 }

// NamespaceRetention is the shortest workflow execution retention of the
// routes' namespaces: the one that forgets first decides.
func NamespaceRetention(ctx context.Context, cfg config.Config, tc client.Client) (time.Duration, error) {
	ret := ledger.Forever
	for _, name := range routeNamespaces(cfg) {
		ns, err := tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: name})
		if err != nil {
			return 0, fmt.Errorf("reading the retention of Temporal namespace %s: %w", name, err)
		}
		ret = min(ret, ns.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration())
	}
	return ret, nil
}

// topicRetentions reads the topics' retention.ms (ledger.Forever for -1),
// segment.ms and cleanup.policy. unread names the topics whose retention
// could not be read, with why; err is a request that failed as a whole.
func topicRetentions(ctx context.Context, adm *kadm.Client, topics []string) (map[string]ledger.TopicRetention, map[string]error, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return nil, nil, err
	}
	out, unread := map[string]ledger.TopicRetention{}, map[string]error{}
	for _, rc := range rcs {
		if rc.Err != nil {
			unread[rc.Name] = rc.Err
			continue
		}
		var tr ledger.TopicRetention
		seen := map[string]bool{}
		for _, c := range rc.Configs {
			switch c.Key {
			case "retention.ms", "segment.ms":
				ms, err := strconv.ParseInt(c.MaybeValue(), 10, 64)
				d := time.Duration(ms) * time.Millisecond
				switch {
				case err != nil:
					unread[rc.Name] = fmt.Errorf("unreadable %s %q", c.Key, c.MaybeValue())
					continue
				case ms < 0 || ms > int64(ledger.Forever/time.Millisecond):
					d = ledger.Forever
				}
				if c.Key == "retention.ms" {
					tr.Retention = d
				} else {
					tr.Segment = d
				}
			case "cleanup.policy":
				policies := strings.Split(strings.ReplaceAll(c.MaybeValue(), " ", ""), ",")
				tr.Compacted = slices.Contains(policies, "compact") && !slices.Contains(policies, "delete")
			default:
				continue
			}
			seen[c.Key] = true
		}
		if unread[rc.Name] != nil {
			continue
		}
		for _, k := range []string{"retention.ms", "segment.ms"} {
			if !seen[k] {
				unread[rc.Name] = fmt.Errorf("the broker did not say its %s", k)
			}
		}
		if unread[rc.Name] == nil {
			out[rc.Name] = tr
		}
	}
	for _, t := range topics {
		if _, ok := out[t]; !ok && unread[t] == nil {
			unread[t] = errors.New("the broker did not say its retention.ms")
		}
	}
	return out, unread, nil
}
