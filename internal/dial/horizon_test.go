package dial

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	namespacepb "go.temporal.io/api/namespace/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/processor/decide"
)

// The horizon check reads every namespace the routes start workflows in.
func TestRouteNamespaces(t *testing.T) {
	cfg := config.Default()
	cfg.Temporal.Namespace = "main"
	cfg.Routes = decide.Routes{{ID: "a"}, {ID: "b", Namespace: "other"}, {ID: "c", Namespace: "main"}, {ID: "d", Namespace: "other"}}
	if got := routeNamespaces(cfg); !slices.Equal(got, []string{"main", "other"}) {
		t.Errorf("routeNamespaces = %v", got)
	}
}

// namespaceOf is a Temporal client whose namespaces all keep closed runs
// for retention (DescribeNamespace is all the horizon asks).
type namespaceOf struct {
	client.Client
	retention time.Duration
}

func (n namespaceOf) WorkflowService() workflowservice.WorkflowServiceClient {
	return describeNamespace{retention: n.retention}
}

type describeNamespace struct {
	workflowservice.WorkflowServiceClient
	retention time.Duration
}

func (d describeNamespace) DescribeNamespace(context.Context, *workflowservice.DescribeNamespaceRequest, ...grpc.CallOption) (*workflowservice.DescribeNamespaceResponse, error) {
	return &workflowservice.DescribeNamespaceResponse{Config: &namespacepb.NamespaceConfig{WorkflowExecutionRetentionTtl: durationpb.New(d.retention)}}, nil
}

// TestHorizonCountsTheSegmentSpan: Kafka deletes whole segments, once the
// newest record of a segment is older than retention.ms, and a segment
// takes records for up to segment.ms: a record stays up to retention.ms +
// segment.ms. A ledger that remembers longer than retention.ms but not
// than the sum forgets events a replay from the log start still meets.
func TestHorizonCountsTheSegmentSpan(t *testing.T) {
	const day = 24 * time.Hour
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	ms := func(d time.Duration) *string { s := strconv.FormatInt(d.Milliseconds(), 10); return &s }
	for name, cfgs := range map[string]map[string]*string{
		"orders":  {"retention.ms": ms(7 * day), "segment.ms": ms(7 * day)},
		"signups": {"retention.ms": ms(7 * day), "segment.ms": ms(day)},
	} {
		if _, err := adm.CreateTopic(ctx, 1, 1, cfgs, name); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.Default()
	cfg.Kafka.Topics = []string{"orders", "signups"}
	cfg.Routes = decide.Routes{{ID: "a", IDReusePolicy: decide.ReuseRejectDuplicate}}
	// The ledger remembers 10 days, Temporal a day: longer than retention.ms
	// (7 days), but not than the 14 days an orders record may stay.
	h, err := ReadHorizon(ctx, cfg, 10*day, namespaceOf{retention: day}, adm)
	if err != nil {
		t.Fatal(err)
	}
	err = h.Check()
	if err == nil || !strings.Contains(err.Error(), "orders") || !strings.Contains(err.Error(), "segment.ms") || strings.Contains(err.Error(), "signups") {
		t.Fatalf("a ledger of 10 days over orders (retention.ms 7d, segment.ms 7d) and signups (7d, 1d): %v, want an error naming orders and segment.ms, not signups", err)
	}
	// 15 days cover both.
	if h, err = ReadHorizon(ctx, cfg, 15*day, namespaceOf{retention: day}, adm); err != nil || h.Check() != nil {
		t.Fatalf("a ledger of 15 days: %v %v", err, h.Check())
	}
}

// TestHorizonCompactedTopicKeepsForever: a topic compacted and not deleted
// (cleanup.policy compact) keeps the newest record of each key whatever its
// retention.ms: no ledger retention covers it.
func TestHorizonCompactedTopicKeepsForever(t *testing.T) {
	const day = 24 * time.Hour
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	for name, policy := range map[string]string{"profiles": "compact", "orders": "compact,delete"} {
		if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &policy, "retention.ms": ptr("3600000"), "segment.ms": ptr("3600000")}, name); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.Default()
	cfg.Kafka.Topics = []string{"profiles", "orders"}
	cfg.Routes = decide.Routes{{ID: "a", IDReusePolicy: decide.ReuseRejectDuplicate}}
	h, err := ReadHorizon(ctx, cfg, 365*day, namespaceOf{retention: day}, adm)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Check(); err == nil || !strings.Contains(err.Error(), "profiles (cleanup.policy compact") || strings.Contains(err.Error(), "orders") {
		t.Fatalf("a ledger of a year over a compacted topic: %v, want an error naming profiles and its cleanup.policy, not orders", err)
	}
}

func ptr[T any](v T) *T { return &v }
