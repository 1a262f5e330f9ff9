package app

import (
	"cmp"
	"context"
	"errors"
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
)

// forever stands for "kept forever" (retention.ms -1, postgres.retention 0).
const forever = time.Duration(math.MaxInt64)

// Horizon is what decides whether a replay from a topic's log start can
// start a workflow a second time: how long the ledger remembers a started
// workflow ID, how long Temporal keeps a closed run (and so, under
// reject_duplicate, refuses its ID), and how long each topic's log may
// keep a record.
//
// The rule: whatever remembers an event (the ledger, or Temporal under
// reject_duplicate) must remember it longer than any copy of it can stay
// in a topic. A started row is purged postgres.retention after its start,
// which comes after its record's timestamp. Kafka deletes a record with its
// segment, once the segment's newest record is older than retention.ms; a
// segment takes records for up to segment.ms (segment.bytes may close it
// sooner, never later). So a record stays up to retention.ms + segment.ms
// after its timestamp, and the memory must be longer than that. What dedup
// cannot read is the operator's to add: how long after the first copy a
// producer may re-send an event (the copy lives from its own timestamp),
// producers' clocks ahead of the brokers' (CreateTime), and the brokers'
// log.retention.check.interval.ms. A topic whose retention.ms is -1, or
// that is compacted and not deleted (cleanup.policy compact), keeps records
// forever: no memory short of forever covers it.
type Horizon struct {
	Ledger time.Duration // postgres.retention; forever when 0
	// LedgerBy names the setting Ledger comes from (postgres.retention
	// when empty; dedup ledger purge says --older-than).
	LedgerBy  string
	Namespace time.Duration             // the namespace's workflow execution retention
	Topics    map[string]TopicRetention // per source topic
	// OnlyLedger is set when a route's reuse policy lets Temporal start a
	// closed ID again (allow_*): then only the ledger guards replays.
	OnlyLedger bool
}

// TopicRetention is what decides how long a topic keeps a record.
type TopicRetention struct {
	Retention time.Duration // retention.ms; forever for -1
	Segment   time.Duration // segment.ms
	// Compacted: cleanup.policy has compact and not delete: the newest
	// record of each key is kept whatever retention.ms says.
	Compacted bool
}

// Keeps is how long after its timestamp the topic may keep a record:
// retention.ms + segment.ms, or forever.
func (r TopicRetention) Keeps() time.Duration {
	if r.Compacted || r.Retention == forever || r.Segment == forever || r.Retention > forever-r.Segment {
		return forever
	}
	return r.Retention + r.Segment
}

func (r TopicRetention) String() string {
	switch {
	case r.Compacted:
		return "cleanup.policy compact: the newest record of each key is kept forever"
	case r.Retention == forever:
		return "retention.ms -1: kept forever"
	}
	return fmt.Sprintf("retention.ms %s + segment.ms %s: a record stays up to %s", span(r.Retention), span(r.Segment), span(r.Keeps()))
}

// Check says, naming the settings, how a replay from a log start could
// re-open duplicates; nil when it cannot.
func (h Horizon) Check() error {
	ledgerBy := cmp.Or(h.LedgerBy, "postgres.retention")
	guard, by := h.Ledger, ledgerBy
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
		if r := h.Topics[t]; r.Keeps() >= guard {
			short = append(short, fmt.Sprintf("%s (%s)", t, r))
		}
	}
	if len(short) == 0 {
		return nil
	}
	why := ""
	if h.OnlyLedger {
		why = " (a route uses an allow_* reuse policy, so Temporal does not refuse a closed ID)"
	}
	fix := "set postgres.retention to 0 (keep rows forever) or"
	if h.LedgerBy != "" {
		fix = "use " + h.LedgerBy
	}
	return fmt.Errorf("%s: events older than %s (%s%s) are forgotten, but topics %s may keep them as long or longer "+
		"(Kafka deletes whole segments, once a segment's newest record is older than retention.ms): "+
		"replaying from the log start would start their workflows again; %s longer than each topic's retention.ms + segment.ms "+
		"(plus the longest delay after which your producers re-send an event), lower the topics' segment.ms or retention.ms, "+
		"or accept it with postgres.accept_short_horizon: true", ledgerBy, span(guard), by, why, strings.Join(short, ", "), fix)
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

// checkHorizon reads the namespaces' and the topics' retention and checks
// the horizon at start. It only asks when the ledger purges (postgres.
// retention > 0) and the operator has not accepted a short horizon. What
// cannot be read is logged, not fatal: dedup starts while Temporal or
// Kafka is down.
func checkHorizon(ctx context.Context, cfg Config, tc client.Client, log *slog.Logger, kopts ...kgo.Opt) error {
	if cfg.Postgres.Retention == 0 || cfg.Postgres.AcceptShortHorizon {
		return nil
	}
	h := Horizon{Ledger: cfg.Postgres.Retention, OnlyLedger: onlyLedger(cfg)}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ns, err := namespaceRetention(ctx, cfg, tc)
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
func ReadHorizon(ctx context.Context, cfg Config, ledgerMemory time.Duration, tc client.Client, adm *kadm.Client) (Horizon, error) {
	h := Horizon{Ledger: ledgerMemory, OnlyLedger: onlyLedger(cfg)}
	if h.Ledger == 0 {
		h.Ledger = forever
	}
	ns, err := namespaceRetention(ctx, cfg, tc)
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
// good (ledgerOnlyRoutes: an allow_* reuse policy, a signal route).
func onlyLedger(cfg Config) bool { return len(ledgerOnlyRoutes(cfg)) > 0 }

// namespaceRetention is the shortest workflow execution retention of the
// routes' namespaces: the one that forgets first decides.
func namespaceRetention(ctx context.Context, cfg Config, tc client.Client) (time.Duration, error) {
	ret := forever
	for _, name := range routeNamespaces(cfg) {
		ns, err := tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: name})
		if err != nil {
			return 0, fmt.Errorf("reading the retention of Temporal namespace %s: %w", name, err)
		}
		ret = min(ret, ns.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration())
	}
	return ret, nil
}

// topicRetentions reads the topics' retention.ms (forever for -1),
// segment.ms and cleanup.policy. unread names the topics whose retention
// could not be read, with why; err is a request that failed as a whole.
func topicRetentions(ctx context.Context, adm *kadm.Client, topics []string) (map[string]TopicRetention, map[string]error, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return nil, nil, err
	}
	out, unread := map[string]TopicRetention{}, map[string]error{}
	for _, rc := range rcs {
		if rc.Err != nil {
			unread[rc.Name] = rc.Err
			continue
		}
		var tr TopicRetention
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
				case ms < 0 || ms > int64(forever/time.Millisecond):
					d = forever
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
