package bench

import (
	"context"
	"strconv"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The broker advertises the proxy's address, so a client that follows
// metadata stays behind the proxy, and SetLatency's round trip reaches
// every request.
func TestKafkaStaysBehindTheLatencyProxy(t *testing.T) {
	ctx := context.Background()
	front, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	listen, back := advertising(front)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ListenFn(listen), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	if err := srv.Collection.Add(toxiproxy.NewProxy(srv, "kafka", front, *back), true); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"temporal", "postgres"} { // SetLatency sets all three
		if err := srv.Collection.Add(toxiproxy.NewProxy(srv, name, "127.0.0.1:0", *back), true); err != nil {
			t.Fatal(err)
		}
	}
	api, err := serveAPI(srv)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(front))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := md.Brokers.NodeIDs(); len(got) != 1 {
		t.Fatalf("brokers %v, want one", got)
	}
	if b := md.Brokers[0]; b.Host+":"+itoa(b.Port) != front {
		t.Fatalf("the broker advertises %s:%d, want the proxy %s (the real listener is %s)", b.Host, b.Port, front, *back)
	}
	const rtt = 40 * time.Millisecond
	if err := SetLatency(api, Latency{Kafka: rtt}); err != nil {
		t.Fatal(err)
	}
	// A produce is at least one round trip to the advertised broker; the
	// injected latency is a floor, not a timing race.
	began := time.Now()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d < rtt {
		t.Fatalf("a produce took %s with a %s round trip on the proxy: the client went around it", d, rtt)
	}
	// Setting it again replaces the toxics rather than adding to them.
	if err := SetLatency(api, Latency{}); err != nil {
		t.Fatal(err)
	}
	p, err := srv.Collection.Get("kafka")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.Toxics.GetToxicArray()); n != 0 {
		t.Fatalf("%d toxics left after setting no latency", n)
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
