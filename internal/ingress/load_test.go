package ingress

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dedupio/dedup/internal/ingress/ingressconfig"
)

// The load test's shape. Memory: each process's peak resident set must
// stay under twice loadConnsPerProc+probeConns concurrent requests times
// loadMaxBody (ingressconfig.Limits's bound), plus loadBaseline: an idle ingress, just started, has a
// VmHWM of about 31 MiB on the 2-core test machine; the rest of the
// baseline is for what a body-size term does not cover: the Go heap's
// headroom (GOGC=100 lets it reach twice the live heap), the Kafka
// producer's buffers, the PostgreSQL pool and the HTTP server's
// per-connection buffers and goroutines.
const (
	loadRequests     = 10_000
	loadWorkers      = 200      // HTTP clients at once, over both processes
	loadConnsPerProc = 100      // the most requests at once on one process (the transport's limit)
	probeConns       = 2        // the probes' own client: at most two at once
	loadMaxBody      = 64 << 10 // ingress.max_body_bytes
	loadBigBody      = 60 << 10 // one request in twenty carries this much
	loadBaseline     = 64 << 20
	loadProbes       = 100 // keys held in flight on one process while the other is asked
	loadPairs        = 1500
	loadRepeats      = 500
)

// TestLoad: two `dedup ingress` processes against one Kafka and one
// PostgreSQL, under bounded loopback load.
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test: builds dedup and runs 10,000 requests")
	}
	e := newLoadEnv(t)
	t.Run("mixed", func(t *testing.T) { testLoadMixed(t, e) })
	t.Run("limits", func(t *testing.T) { testLoadTenantLimits(t, e) })
}

// answer is one request's outcome.
type answer struct {
	proc       int
	key        string
	code       int
	body       []byte
	retryAfter string
	start, end time.Time
	err        error
}

func (a answer) overlaps(b answer) bool { return a.start.Before(b.end) && b.start.Before(a.end) }

// loadClient posts events to the processes.
type loadClient struct {
	hc    *http.Client
	bases []string
	token string
}

func newLoadClient(conns int, bases []string) *loadClient {
	return &loadClient{bases: bases, hc: &http.Client{Timeout: time.Minute,
		Transport: &http.Transport{MaxConnsPerHost: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute}}}
}

// post sends an event: plain JSON with an Idempotency-Key, or (form 1) a
// structured CloudEvent whose id is the key.
func (c *loadClient) post(proc int, key string, form int, data []byte) answer {
	var body []byte
	req, _ := http.NewRequest(http.MethodPost, c.bases[proc]+"/v1/events", nil)
	if form == 1 {
		body = fmt.Appendf(nil, `{"specversion":"1.0","id":%q,"type":"order.created","source":"load","data":%s}`, key, data)
		req.Header.Set("Content-Type", "application/cloudevents+json")
	} else {
		body = fmt.Appendf(nil, `{"type":"order.created","data":%s}`, data)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", `"`+key+`"`)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	a := answer{proc: proc, key: key, start: time.Now()}
	resp, err := c.hc.Do(req)
	if err != nil {
		a.err, a.end = err, time.Now()
		return a
	}
	a.body, a.err = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	a.end, a.code, a.retryAfter = time.Now(), resp.StatusCode, resp.Header.Get("Retry-After")
	return a
}

// eventData is request i's payload: small, or loadBigBody in one of
// twenty.
func eventData(i int) []byte {
	if i%20 == 7 {
		return fmt.Appendf(nil, `{"n":%d,"pad":%q}`, i, strings.Repeat("x", loadBigBody))
	}
	return fmt.Appendf(nil, `{"n":%d,"total":12.5}`, i)
}

// keys hands out event IDs on one side of the hold partition.
type keys struct {
	next int
}

func (k *keys) on(partition bool) string {
	for {
		k.next++
		key := fmt.Sprintf("load-%06d", k.next)
		if (partitionOf(key) == holdPartition) == partition {
			return key
		}
	}
}

func testLoadMixed(t *testing.T, e *loadEnv) {
	procs := make([]*ingressProc, 2)
	var bases []string
	for i := range procs {
		cfg := e.config(loadMaxBody)
		// No rate limit here (the limits subtest has one); the cap on
		// requests at once is what the clients can send, which the
		// memory bound is computed from.
		cfg.Ingress.Limits = ingressconfig.Limits{Rate: 1e6, Burst: 1 << 20, MaxConcurrent: loadConnsPerProc + probeConns, MaxConcurrentPerTenant: loadConnsPerProc + probeConns}
		p, err := e.start(fmt.Sprintf("ingress%d", i+1), cfg, configYAML(t, cfg, nil))
		if err != nil {
			t.Fatal(err)
		}
		procs[i] = p
		bases = append(bases, p.base)
	}
	idle := make([]int64, len(procs))
	for i, p := range procs {
		idle[i], _ = p.memory(t)
	}

	// The jobs: distinct keys, same-key pairs sent at once to both
	// processes, and repeats after the first answer; the probes run beside
	// them.
	var k keys
	rng := rand.New(rand.NewPCG(1, 2))
	type job struct {
		kind string // single, pair, repeat
		key  string
		proc int
		form int
		data []byte
	}
	singles := loadRequests - 2*loadPairs - 2*loadRepeats - 4*loadProbes
	var jobs []job
	n := 0
	add := func(kind string, count int) {
		for range count {
			jobs = append(jobs, job{kind: kind, key: k.on(false), proc: n % 2, form: n / 2 % 2, data: eventData(n)})
			n++
		}
	}
	add("single", singles)
	add("pair", loadPairs)
	add("repeat", loadRepeats)
	rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	probeKeys := make([]string, loadProbes)
	for i := range probeKeys {
		probeKeys[i] = k.on(true)
	}
	all := slices.Clone(probeKeys)
	for _, j := range jobs {
		all = append(all, j.key)
	}
	e.noCollisions(all)

	cl := newLoadClient(loadConnsPerProc, bases)
	var (
		mu      sync.Mutex
		answers = map[string][]answer{} // by key, in the order sent where it matters
		kinds   = map[string]string{}
	)
	record := func(kind string, as ...answer) {
		mu.Lock()
		defer mu.Unlock()
		kinds[as[0].key] = kind
		answers[as[0].key] = append(answers[as[0].key], as...)
	}
	ch := make(chan job)
	var wg sync.WaitGroup
	t0 := time.Now()
	for range loadWorkers {
		wg.Go(func() {
			for j := range ch {
				switch j.kind {
				case "single":
					record(j.kind, cl.post(j.proc, j.key, j.form, j.data))
				case "pair":
					var other answer
					var pw sync.WaitGroup
					pw.Go(func() { other = cl.post(1-j.proc, j.key, j.form, j.data) })
					first := cl.post(j.proc, j.key, j.form, j.data)
					pw.Wait()
					record(j.kind, first, other)
				case "repeat":
					first := cl.post(j.proc, j.key, j.form, j.data)
					record(j.kind, first, cl.post(1-j.proc, j.key, j.form, j.data))
				}
			}
		})
	}
	var probeFails []string
	var pg sync.WaitGroup
	pg.Go(func() { probeFails = runProbes(t, e.kafka, newLoadClient(probeConns, bases), probeKeys, record) })
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
	pg.Wait()
	wall := time.Since(t0)

	// What every answer must be.
	codes := map[int]int{}
	perProc := make([]map[int]int, len(procs))
	for i := range perProc {
		perProc[i] = map[int]int{}
	}
	var fails []string
	fail := func(format string, args ...any) {
		if len(fails) < 20 {
			fails = append(fails, fmt.Sprintf(format, args...))
		} else if len(fails) == 20 {
			fails = append(fails, "...")
		}
	}
	total, accepted, pairsOverlapped := 0, 0, 0
	var lat []time.Duration
	for key, as := range answers {
		for _, a := range as {
			total++
			if a.err != nil {
				fail("%s on %s: %v", key, procs[a.proc].name, a.err)
				continue
			}
			codes[a.code]++
			perProc[a.proc][a.code]++
			lat = append(lat, a.end.Sub(a.start))
			if a.code == http.StatusAccepted {
				accepted++
			}
			if a.code != http.StatusAccepted && a.code != http.StatusConflict {
				fail("%s on %s: %d %s", key, procs[a.proc].name, a.code, short(a.body))
			}
			// A 409 only while another request for the key was in flight
			// (and was answered 202).
			if a.code == http.StatusConflict && !slices.ContainsFunc(as, func(b answer) bool {
				return b.code == http.StatusAccepted && b.overlaps(a)
			}) {
				fail("%s (%s): 409 on %s with no request for it in flight", key, kinds[key], procs[a.proc].name)
			}
		}
		switch kinds[key] {
		case "single":
			if as[0].code != http.StatusAccepted {
				fail("%s, a key sent once: %d", key, as[0].code)
			}
		case "pair":
			a, b := as[0], as[1]
			switch {
			case a.code == http.StatusConflict && b.code == http.StatusConflict:
				fail("%s, sent at once to both: 409 from both", key)
			case a.code == http.StatusAccepted && b.code == http.StatusAccepted:
				if !bytes.Equal(a.body, b.body) {
					fail("%s, sent at once to both: two 202s with different bodies", key)
				}
			default:
				pairsOverlapped++
			}
		case "repeat":
			if as[0].code != http.StatusAccepted || as[1].code != http.StatusAccepted || !bytes.Equal(as[0].body, as[1].body) {
				fail("%s, repeated after its answer on the other process: %d then %d (%s / %s)", key, as[0].code, as[1].code, short(as[0].body), short(as[1].body))
			}
		}
	}
	fails = append(fails, probeFails...)
	for _, f := range fails {
		t.Error(f)
	}
	if total != loadRequests {
		t.Errorf("%d answers, want %d", total, loadRequests)
	}
	// 202 only after Kafka's acknowledgement, and 409 writes nothing: one
	// record per 202 (the ledger is empty, so every 202 is produced).
	if w := e.kafka.written(t); w != int64(accepted) {
		t.Errorf("%d records in Kafka, %d answers 202", w, accepted)
	}
	for i, p := range procs {
		m := p.metrics(t)
		if d := metric(m, "dedup_ingress_lock_degraded_total"); d != 0 {
			t.Errorf("%s: dedup_ingress_lock_degraded_total %v, want 0", p.name, d)
		}
		for code, n := range perProc[i] {
			if got := metric(m, "dedup_ingress_requests_total", "api", "events", "code", fmt.Sprint(code)); got != float64(n) {
				t.Errorf("%s: dedup_ingress_requests_total{code=%d} %v, the clients saw %d", p.name, code, got, n)
			}
		}
	}

	// Figures.
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(f float64) time.Duration { return lat[int(f*float64(len(lat)-1))].Round(100 * time.Microsecond) }
	t.Logf("%d requests in %s: %.0f requests/s; latency p50 %s p99 %s max %s", total, wall.Round(time.Millisecond),
		float64(total)/wall.Seconds(), q(.5), q(.99), q(1))
	t.Logf("codes %v; per process %v; same-key pairs: %d of %d answered 202+409 (overlapping), the rest 202 twice", codes, perProc, pairsOverlapped, loadPairs)
	t.Logf("%d keys held in flight on one process under the load: %d of them 409 from both processes, then the same 202 from the other", loadProbes, loadProbes-len(probeFails))
	bound := int64(2*(loadConnsPerProc+probeConns)*loadMaxBody + loadBaseline) // ingressconfig.Limits's bound
	for i, p := range procs {
		peak, now := p.memory(t)
		t.Logf("%s: peak RSS (VmHWM) %.1f MiB (idle after start %.1f MiB), RSS now %.1f MiB; bound %.1f MiB = 2 x ingress.limits.max_concurrent %d x max_body_bytes %d KiB + %d MiB",
			p.name, mib(peak), mib(idle[i]), mib(now), mib(bound), loadConnsPerProc+probeConns, loadMaxBody>>10, loadBaseline>>20)
		if peak > bound {
			t.Errorf("%s: peak RSS %.1f MiB over the bound %.1f MiB", p.name, mib(peak), mib(bound))
		}
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// short is a body for a message.
func short(b []byte) string {
	if len(b) > 160 {
		return string(b[:160]) + "..."
	}
	return string(b)
}

// runProbes holds a key in flight on one process (its produce request is
// held in Kafka) and asks both processes for it: 409 from each, then 202
// once released, and the same 202 from the other process afterwards.
func runProbes(t *testing.T, k *loadKafka, cl *loadClient, probeKeys []string, record func(string, ...answer)) []string {
	var fails []string
	for i, key := range probeKeys {
		if len(fails) > 10 {
			break
		}
		holder, other := i%2, 1-i%2
		data := eventData(i)
		h := k.hold()
		firstCh := make(chan answer, 1)
		go func() { firstCh <- cl.post(holder, key, 0, data) }()
		var first answer
		select {
		case <-h.held:
		case first = <-firstCh:
			k.armed.CompareAndSwap(h, nil)
			fails = append(fails, fmt.Sprintf("probe %s: answered %d before its record was held", key, first.code))
			continue
		case <-time.After(10 * time.Second):
			k.armed.CompareAndSwap(h, nil)
			close(h.release)
			fails = append(fails, fmt.Sprintf("probe %s: its produce request never reached Kafka", key))
			<-firstCh
			continue
		}
		cross := cl.post(other, key, 0, data)
		local := cl.post(holder, key, 0, data)
		close(h.release)
		first = <-firstCh
		again := cl.post(other, key, 0, data)
		record("probe", first, cross, local, again)
		switch {
		case cross.code != http.StatusConflict:
			fails = append(fails, fmt.Sprintf("probe %s: in flight on process %d, process %d answered %d %s (want 409: the lock is lost)", key, holder+1, other+1, cross.code, short(cross.body)))
		case local.code != http.StatusConflict:
			fails = append(fails, fmt.Sprintf("probe %s: in flight on process %d, it answered a second request %d", key, holder+1, local.code))
		case first.code != http.StatusAccepted || again.code != http.StatusAccepted || !bytes.Equal(first.body, again.body):
			fails = append(fails, fmt.Sprintf("probe %s: %d, then after it %d from the other process (%s / %s)", key, first.code, again.code, short(first.body), short(again.body)))
		}
	}
	return fails
}

// testLoadTenantLimits: per-tenant rate limits (ingress.limits) with
// tenants from a tokens file. One tenant over its rate gets 429 with
// Retry-After; another, at a modest rate meanwhile, gets 202s, as fast
// as alone.
func testLoadTenantLimits(t *testing.T, e *loadEnv) {
	const (
		rate, burst = 50, 100
		tokA        = "acme-0123456789abcdef"
		tokB        = "bravo-0123456789abcdef"
	)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, fmt.Appendf(nil, `tokens:
  - {tenant: acme, token: %q, event_types: ["*"], routes: ["*"], read_status: true}
  - {tenant: bravo, token: %q, event_types: ["*"], routes: ["*"], read_status: true}
`, tokA, tokB), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := e.config(loadMaxBody)
	cfg.Ingress.TokensFile = tokens
	cfg.Kafka.TenantKeysFile = filepath.Join(dir, "tenant-keys.yaml")
	if err := os.WriteFile(cfg.Kafka.TenantKeysFile, []byte(testKeyring), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Ingress.Limits = ingressconfig.Limits{Rate: rate, Burst: burst, MaxConcurrent: 256, MaxConcurrentPerTenant: 128}
	p, err := e.start("ingress-limits", cfg, configYAML(t, cfg, nil))
	if err != nil {
		t.Fatal(err)
	}
	a := newLoadClient(50, []string{p.base})
	a.token = tokA
	b := newLoadClient(4, []string{p.base})
	b.token = tokB

	// bravo alone first: its latency unloaded.
	var alone []time.Duration
	for i := range 10 {
		r := b.post(0, fmt.Sprintf("bravo-alone-%d", i), 0, eventData(i))
		if r.code != http.StatusAccepted {
			t.Fatalf("bravo alone: %d %s", r.code, r.body)
		}
		alone = append(alone, r.end.Sub(r.start))
	}
	// acme: 50 clients as fast as they go (at most 5,000 requests) while
	// bravo sends 40 at 20/s.
	t0 := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	acme := map[int]int{}
	noRetryAfter, sent := 0, 0
	bravoDone := make(chan struct{})
	for range 50 {
		wg.Go(func() {
			for {
				mu.Lock()
				i := sent
				sent++
				mu.Unlock()
				select {
				case <-bravoDone:
					return
				default:
				}
				if i >= 5000 {
					return
				}
				r := a.post(0, fmt.Sprintf("acme-%d", i), 0, eventData(i))
				mu.Lock()
				acme[r.code]++
				if r.code == http.StatusTooManyRequests && r.retryAfter == "" {
					noRetryAfter++
				}
				mu.Unlock()
			}
		})
	}
	var bravo []answer
	tick := time.NewTicker(50 * time.Millisecond)
	for i := range 40 {
		<-tick.C
		bravo = append(bravo, b.post(0, fmt.Sprintf("bravo-%d", i), 0, eventData(i)))
	}
	tick.Stop()
	close(bravoDone)
	wg.Wait()
	elapsed := time.Since(t0)
	t.Logf("acme: %v in %s; bravo: %d requests", acme, elapsed.Round(time.Millisecond), len(bravo))
	if acme[http.StatusTooManyRequests] == 0 {
		t.Errorf("acme over its rate got no 429: %v", acme)
	}
	if noRetryAfter > 0 {
		t.Errorf("%d of acme's 429s without Retry-After", noRetryAfter)
	}
	// The bucket: burst at once, then rate a second (slack for the clock).
	if allowed := burst + int(float64(rate)*elapsed.Seconds()) + 10; acme[http.StatusAccepted] > allowed {
		t.Errorf("acme got %d 202s in %s, more than burst %d + rate %d/s allow (%d)", acme[http.StatusAccepted], elapsed, burst, rate, allowed)
	}
	for c := range acme {
		if c != http.StatusAccepted && c != http.StatusTooManyRequests {
			t.Errorf("acme: %d answers %d", acme[c], c)
		}
	}
	slices.Sort(alone)
	var slowest time.Duration
	for _, r := range bravo {
		if r.err != nil || r.code != http.StatusAccepted {
			t.Errorf("bravo, under its rate while acme is over its own: %d %v %s", r.code, r.err, r.body)
		}
		slowest = max(slowest, r.end.Sub(r.start))
	}
	t.Logf("bravo: slowest %s under acme's load, %s alone", slowest.Round(100*time.Microsecond), alone[len(alone)-1].Round(100*time.Microsecond))
	if limit := 10*alone[len(alone)-1] + 200*time.Millisecond; slowest > limit {
		t.Errorf("bravo slowed by acme: slowest %s, want under %s (ten times its slowest alone, plus 200 ms)", slowest, limit)
	}
}
