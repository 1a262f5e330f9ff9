package dial

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// refusingTemporal is a gRPC server that answers every call as a Temporal
// frontend refusing the client's credentials does (Unauthenticated), and
// counts the calls.
func refusingTemporal(t *testing.T) (addr string, calls *atomic.Int64) {
	t.Helper()
	calls = &atomic.Int64{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		calls.Add(1)
		return grpcstatus.Error(codes.Unauthenticated, "invalid API key")
	}))
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String(), calls
}

// silentTemporal accepts connections and never answers: a Temporal that
// hangs.
func silentTemporal(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	return l.Addr().String()
}

func clientConfig(t *testing.T, temporal string) config.Config {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	url := pgtest.NewDatabase(t)
	if err := ledger.Migrate(context.Background(), url); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Kafka.Brokers = cluster.ListenAddrs()
	cfg.Kafka.Group, cfg.Kafka.Topics, cfg.Kafka.ResetOffset = "g", []string{"events"}, "earliest"
	cfg.Routes = decide.Routes{{ID: "a", Match: decide.Match{Type: "x"}, WorkflowType: "W", TaskQueue: "q"}}
	cfg.Postgres.URL = url
	cfg.Temporal.HostPort = temporal
	cfg.Temporal.APIKey = "" // plaintext to the fake
	return cfg
}

// OpenClient (dedup ingress) does not wait for Temporal, which only
// Status and Result need: Temporal is dialled lazily. A Temporal that
// refuses the credentials answers the first read with the refusal; one
// that hangs delays nothing at open, and the read fails when its context
// ends. Enqueue works in both cases: Kafka is all it needs.
func TestOpenClientDoesNotWaitForTemporal(t *testing.T) {
	refusing, calls := refusingTemporal(t)
	for name, addr := range map[string]string{"refusing": refusing, "silent": silentTemporal(t)} {
		t.Run(name, func(t *testing.T) {
			cfg := clientConfig(t, addr)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			t0 := time.Now()
			c, err := OpenClient(ctx, cfg, nil)
			if err != nil {
				t.Fatalf("OpenClient with a %s Temporal: %v, want a client (Temporal is read on first use)", name, err)
			}
			defer c.Close()
			if d := time.Since(t0); d > 5*time.Second {
				t.Errorf("OpenClient took %s, want it not to wait for Temporal", d)
			}
			if name == "refusing" && calls.Load() != 0 {
				t.Errorf("OpenClient called Temporal %d times, want none before the first read", calls.Load())
			}
			h, err := c.Enqueue(ctx, client.Event{Type: "x", IdempotencyKey: "k1"})
			if err != nil || !h.Produced {
				t.Fatalf("Enqueue with a %s Temporal: %+v %v", name, h, err)
			}
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			defer rcancel()
			_, err = c.Status(rctx, h.WorkflowIDs()[0])
			switch {
			case err == nil:
				t.Fatalf("Status with a %s Temporal: no error", name)
			case name == "refusing" && serviceerror.ToStatus(err).Code() != codes.Unauthenticated:
				t.Errorf("Status with a refusing Temporal: %v, want the refusal (Unauthenticated)", err)
			case name == "silent" && !errors.Is(err, context.DeadlineExceeded) && serviceerror.ToStatus(err).Code() != codes.DeadlineExceeded:
				t.Errorf("Status with a silent Temporal: %v, want the context's deadline", err)
			}
		})
	}
}
