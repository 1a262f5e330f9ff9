package devstack

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/starter"
)

// devTemporal is an embedded Temporal with namespace default, a client of
// it, and dedup's starter over that client with its search attributes on:
// stopped and closed when the test ends.
func devTemporal(t *testing.T) (*Temporal, client.Client, *starter.Temporal) {
	t.Helper()
	tmp, err := StartTemporal(TemporalConfig{Namespaces: []string{"default"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tmp.Stop() })
	tc, err := client.Dial(client.Options{HostPort: tmp.HostPort(), Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	return tmp, tc, starter.New(tc, starter.Config{Namespace: "default", StartTimeout: 10 * time.Second, SearchAttributes: starter.SearchAttributesOn})
}

// startRequest is the start of route a for event evt-i, from offset i of
// topic t: it carries the router's six search attributes.
func startRequest(i int) decide.StartRequest {
	id := fmt.Sprintf("evt-%d", i)
	return decide.StartRequest{WorkflowID: "activity-a:" + id, WorkflowType: "RunActivityWorkflow", TaskQueue: "nobody",
		ReusePolicy: decide.ReuseRejectDuplicate, Input: schemas.WorkflowInput{EventID: id, ActivityID: "a", IDRule: "field"},
		Record: &decide.RecordRef{Topic: "t", Partition: 0, Offset: int64(i)}}
}

// A start that carries dedup's search attributes is answered from the
// frontend's namespace cache, as a production server answers it. With
// ForceSearchAttributesCacheRefreshOnRead (what `temporal server
// start-dev` sets) every such start reads the namespace from persistence,
// one at a time under the registry's lock, within 3 s: the in-memory
// store's one SQLite connection, busy under a benchmark's load, made that
// read time out, and the server answers a timed-out read "Namespace
// default is not found." (nsregistry's getNamespaceByNamePersistence), a
// refusal dedup takes as permanent.
func TestStartWithSearchAttributesIsServedFromTheNamespaceCache(t *testing.T) {
	tmp, _, st := devTemporal(t)
	ctx := context.Background()
	start := func(i int) {
		t.Helper()
		if _, err := st.Start(ctx, startRequest(i)); err != nil {
			t.Fatal(err)
		}
	}
	start(0) // caches warm
	before := namespaceReads(t, tmp.MetricsURL())
	const n = 50
	for i := 1; i <= n; i++ {
		start(i)
	}
	if reads := namespaceReads(t, tmp.MetricsURL()) - before; reads >= n {
		t.Fatalf("%d starts with search attributes read the namespace from persistence %v times", n, reads)
	}
}

// namespaceReads is the server's count of persistence GetNamespace
// requests (every service's; its persistence_requests counter stays 0,
// its latency histogram counts them).
func namespaceReads(t *testing.T, url string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "persistence_latency_count{") || !strings.Contains(l, `operation="GetNamespace"`) {
			continue
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sum
}

// A dev-stack user who registers a namespace and dedup's search
// attributes while the server runs gets a start within 30 s, and no error
// before it that dedup would dead-letter (permanent).
func TestNamespaceRegisteredWhileRunningStartsWithoutPermanentRefusal(t *testing.T) {
	tmp, err := StartTemporal(TemporalConfig{Namespaces: []string{"default"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tmp.Stop() }()
	ctx := context.Background()
	nc, err := client.NewNamespaceClient(client.Options{HostPort: tmp.HostPort()})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const ns = "late"
	ret := durationpb.New(24 * time.Hour)
	if err := nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{Namespace: ns, WorkflowExecutionRetentionPeriod: ret}); err != nil {
		t.Fatal(err)
	}
	tc, err := client.Dial(client.Options{HostPort: tmp.HostPort(), Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	var regErr error
	for i := 0; i < 100; i++ {
		if regErr = RegisterSearchAttributes(ctx, tc.OperatorService(), ns); regErr == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if regErr != nil {
		t.Fatal(regErr)
	}
	added := time.Now()
	st := starter.New(tc, starter.Config{Namespace: ns, StartTimeout: 10 * time.Second, SearchAttributes: starter.SearchAttributesOn})
	req := startRequest(1)
	for {
		_, err := st.Start(ctx, req)
		if err == nil {
			t.Logf("started %v after the attributes were added", time.Since(added))
			return
		}
		t.Logf("%v: %v (permanent %v)", time.Since(added).Round(time.Millisecond), err, starter.IsPermanent(err))
		if starter.IsPermanent(err) {
			t.Fatalf("permanent: %v", err)
		}
		if time.Since(added) > 30*time.Second {
			t.Fatalf("no start within 30 s: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// An operator who removes one of dedup's search attributes while routers
// run (by mistake, or to recreate it) sees starts wait, never a refusal
// dedup would dead-letter, and the starts resume once it is back.
func TestSearchAttributeRemovedWhileRunningWaitsAndResumes(t *testing.T) {
	_, tc, st := devTemporal(t)
	ctx := context.Background()
	req := startRequest
	if _, err := st.Start(ctx, req(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.OperatorService().RemoveSearchAttributes(ctx, &operatorservice.RemoveSearchAttributesRequest{
		Namespace: "default", SearchAttributes: []string{starter.AttrKafkaOffset}}); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	refused := false
	for i := 1; ; i++ {
		_, err := st.Start(ctx, req(i))
		if err != nil {
			t.Logf("%v after removal: %v (permanent %v)", time.Since(removed).Round(time.Millisecond), err, starter.IsPermanent(err))
			if starter.IsPermanent(err) {
				t.Fatalf("permanent: %v: every record would be dead-lettered", err)
			}
			refused = true
			break
		}
		if time.Since(removed) > 30*time.Second {
			t.Fatal("starts still accepted 30 s after the attribute was removed: nothing tested")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !refused {
		t.Fatal("never refused")
	}
	if err := RegisterSearchAttributes(ctx, tc.OperatorService(), "default"); err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	for {
		_, err := st.Start(ctx, req(1000))
		if err == nil {
			t.Logf("started %v after the attribute was back", time.Since(added).Round(time.Millisecond))
			return
		}
		if starter.IsPermanent(err) {
			t.Fatalf("permanent after re-adding: %v", err)
		}
		if time.Since(added) > 30*time.Second {
			t.Fatalf("no start within 30 s of re-adding: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
