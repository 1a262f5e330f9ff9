package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/schemas"
)

// Options configure a Server.
type Options struct {
	// Propagator, if set, reads a request's trace context (traceparent,
	// tracestate, baggage) for the record it writes (tracing.go); nil:
	// tracing off.
	Propagator propagation.TextMapPropagator
	// MaxBodyBytes refuses larger bodies (413); at most the routers'
	// kafka.max_value_bytes.
	MaxBodyBytes int
	// Tokens, when set, are the bearer tokens that may call the API and
	// their tenants; nil: every caller is the anonymous principal (no
	// tenant, every right).
	Tokens *Tokens
	// Limits are the per-tenant rate and the cap on requests at once;
	// zero: none.
	Limits Limits
	// AllowNoKey lets an event without a key (no Idempotency-Key, no
	// CloudEvents id, no id field) through, its ID derived from content
	// by the routers' chain; false (ingress.require_key): 400.
	AllowNoKey bool
	// KeyRetention is the ledger's postgres.retention (0: forever), which
	// the OpenAPI description served at /v1/openapi.yaml publishes as
	// x-idempotency-key-expiry (the draft's expiry policy, §2.3).
	KeyRetention time.Duration
	// LookupTimeout bounds each PostgreSQL and Temporal call of a status
	// request; 0: 2s.
	LookupTimeout time.Duration
	// PublicURL prefixes status URLs; "": absolute paths.
	PublicURL string
	// ProduceTimeout bounds the wait for Kafka's acknowledgement.
	ProduceTimeout time.Duration
	// BodyTimeout bounds the reading of a request's body, which happens
	// before the request takes one of Limits.MaxConcurrent's slots (so
	// that callers sending bodies slowly hold no slot); past it: 408.
	// 0: 10s.
	BodyTimeout time.Duration
	// Locks say which keys are in flight; nil: a per-process set.
	Locks    *Locks
	Registry prometheus.Registerer
	Logger   *slog.Logger
	// Locked, if set, runs while a request holds its key's lock, before
	// the record is written (tests hold requests in flight with it).
	Locked func(eventID string)
}

// Server is the ingress's HTTP API over a producer client.
type Server struct {
	c   *client.Client
	o   Options
	mux *http.ServeMux
	m   *metrics
	lim *limiter
}

type metrics struct {
	requests *prometheus.CounterVec   // api, code
	seconds  *prometheus.HistogramVec // api
	degraded prometheus.Counter
	limited  *prometheus.CounterVec // tenant, limit
}

// NewServer builds the API. It registers its metrics in o.Registry.
func NewServer(c *client.Client, o Options) (*Server, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if o.ProduceTimeout <= 0 {
		o.ProduceTimeout = 10 * time.Second
	}
	if o.LookupTimeout <= 0 {
		o.LookupTimeout = 2 * time.Second
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = 10 * time.Second
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dedup_ingress_requests_total",
			Help: "Ingress API requests by API (events, workflows) and status code."}, []string{"api", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "dedup_ingress_request_duration_seconds",
			Help: "Ingress API request latency (for events: until Kafka acknowledged).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, []string{"api"}),
		degraded: prometheus.NewCounter(prometheus.CounterOpts{Name: "dedup_ingress_lock_degraded_total",
			Help: "Requests whose in-flight lock was per process only because PostgreSQL failed: taken so, or lost with a failed locking connection (no 409 across replicas for them)."}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dedup_ingress_limited_total",
			Help: "Requests refused by a limit: rate (429, by tenant) or concurrency (503, this process)."}, []string{"tenant", "limit"}),
	}
	for _, col := range []prometheus.Collector{m.requests, m.seconds, m.degraded, m.limited} {
		if err := o.Registry.Register(col); err != nil {
			return nil, fmt.Errorf("registering ingress metrics: %w", err)
		}
	}
	if o.Locks == nil {
		o.Locks = NewLocks("", o.Logger, m.degraded)
	} else {
		o.Locks.degraded = m.degraded
	}
	s := &Server{c: c, o: o, mux: http.NewServeMux(), m: m, lim: newLimiter(o.Limits)}
	s.mux.HandleFunc("/v1/events", s.instrument("events", s.events))
	s.mux.HandleFunc("/v1/workflows/{id...}", s.instrument("workflows", s.workflow))
	doc := openAPI(o.KeyRetention)
	s.mux.HandleFunc("GET /v1/openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(doc)
	})
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, "not_found", "no such resource: "+r.URL.Path, nil)
	})
	return s, nil
}

// openAPI is the OpenAPI description with this ingress's key expiry.
func openAPI(retention time.Duration) []byte {
	v := `"never: postgres.retention is 0"`
	if retention > 0 {
		v = strconv.Quote(retention.String() + " after the workflow started (postgres.retention)")
	}
	return bytes.Replace(schemas.OpenAPI, []byte("x-idempotency-key-expiry: postgres.retention"), []byte("x-idempotency-key-expiry: "+v), 1)
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

type principalKey struct{}

// principalOf is the request's caller (instrument put it there).
func principalOf(r *http.Request) *Principal {
	p, _ := r.Context().Value(principalKey{}).(*Principal)
	return p
}

// instrument counts and times a handler, and before it checks the bearer
// token (401), the tenant's rate (429) and the process's cap on requests
// at once (503).
func (s *Server) instrument(api string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		p := anonymous
		if s.o.Tokens != nil {
			p = s.o.Tokens.principal(r.Header.Get("Authorization"))
		}
		if p == nil {
			sw.Header().Set("WWW-Authenticate", `Bearer realm="dedup"`)
			writeProblem(sw, http.StatusUnauthorized, "unauthorized", "a bearer token from ingress.tokens_file is required", nil)
		} else if ok, retry := s.lim.allow(p.Tenant, t0); !ok {
			s.m.limited.WithLabelValues(p.Tenant, "rate").Inc()
			sw.Header().Set("Retry-After", retry)
			writeProblem(sw, http.StatusTooManyRequests, "rate_limited",
				fmt.Sprintf("over this tenant's rate (ingress.limits: %g requests/s, burst %d): retry after %s s", s.o.Limits.Rate, s.o.Limits.Burst, retry), nil)
		} else if r, ok = s.readCapped(sw, w, r, api, p.Tenant); !ok {
			// answered: the body was too large, too slow or unreadable,
			// or the tenant's (or the process's) reads were all taken
		} else if !s.lim.acquire(p.Tenant) {
			s.m.limited.WithLabelValues(p.Tenant, "concurrency").Inc()
			sw.Header().Set("Retry-After", "1")
			writeProblem(sw, http.StatusServiceUnavailable, "overloaded",
				fmt.Sprintf("this ingress answers %d requests at once, %d of one tenant (ingress.limits.max_concurrent, max_concurrent_per_tenant): retry",
					s.lim.l.MaxConcurrent, s.lim.l.MaxConcurrentPerTenant), nil)
		} else {
			func() {
				defer s.lim.release(p.Tenant)
				h(sw, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
			}()
		}
		if sw.code == 0 {
			sw.code = http.StatusOK
		}
		s.m.requests.WithLabelValues(api, strconv.Itoa(sw.code)).Inc()
		s.m.seconds.WithLabelValues(api).Observe(time.Since(t0).Seconds())
	}
}

type bodyKey struct{}

// readCapped is readBody within the limiter's slots for bodies being read
// (503 at once when the tenant's share or the process's reads are taken).
func (s *Server) readCapped(sw *statusWriter, w http.ResponseWriter, r *http.Request, api, tenant string) (*http.Request, bool) {
	if api != "events" || r.Method != http.MethodPost {
		return r, true
	}
	if !s.lim.reads(tenant) {
		s.m.limited.WithLabelValues(tenant, "concurrency").Inc()
		sw.Header().Set("Retry-After", "1")
		// The body is not read: the connection closes after the answer
		// (net/http would otherwise read what is left of it first).
		sw.Header().Set("Connection", "close")
		writeProblem(sw, http.StatusServiceUnavailable, "overloaded",
			fmt.Sprintf("this ingress reads %d request bodies at once, %d of one tenant (2 x ingress.limits.max_concurrent, max_concurrent_per_tenant): retry",
				2*s.lim.l.MaxConcurrent, s.lim.l.MaxConcurrentPerTenant), nil)
		return r, false
	}
	defer s.lim.doneReading(tenant)
	return s.readBody(sw, w, r, api)
}

// readBody reads a POST /v1/events body before its request takes a slot,
// within BodyTimeout (408 past it) and max_body_bytes (413), and returns
// the request carrying it; false: answered. w is the connection's own
// writer, whose read deadline it sets.
func (s *Server) readBody(sw *statusWriter, w http.ResponseWriter, r *http.Request, api string) (*http.Request, bool) {
	if api != "events" || r.Method != http.MethodPost {
		return r, true
	}
	if r.ContentLength > int64(s.o.MaxBodyBytes) {
		writeProblem(sw, http.StatusRequestEntityTooLarge, "oversized",
			fmt.Sprintf("the body is %d bytes, over ingress.max_body_bytes %d", r.ContentLength, s.o.MaxBodyBytes), nil)
		return r, false
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.o.BodyTimeout)) // not every writer has one (tests' recorders)
	body, err := io.ReadAll(http.MaxBytesReader(sw, r.Body, int64(s.o.MaxBodyBytes)))
	_ = rc.SetReadDeadline(time.Time{})
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeProblem(sw, http.StatusRequestEntityTooLarge, "oversized", fmt.Sprintf("the body is over ingress.max_body_bytes %d", s.o.MaxBodyBytes), nil)
		return r, false
	case errors.Is(err, os.ErrDeadlineExceeded):
		writeProblem(sw, http.StatusRequestTimeout, "body_timeout", fmt.Sprintf("the body did not arrive within %s", s.o.BodyTimeout), nil)
		return r, false
	case err != nil:
		writeProblem(sw, http.StatusBadRequest, "undecodable", "reading the body: "+err.Error(), nil)
		return r, false
	}
	if body == nil {
		body = []byte{}
	}
	return r.WithContext(context.WithValue(r.Context(), bodyKey{}, body)), true
}

func (s *Server) workflow(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeProblem(w, http.StatusMethodNotAllowed, "method_not_allowed", "GET a workflow's status", nil)
		return
	}
	pr := principalOf(r)
	if !pr.ReadStatus {
		writeProblem(w, http.StatusForbidden, "forbidden", "this token may not read status (read_status)", nil)
		return
	}
	id := r.PathValue("id")
	if !owns(pr, id) {
		notFound(w, id)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.o.LookupTimeout)
	defer cancel()
	st, err := s.c.Status(ctx, id)
	switch {
	case errors.Is(err, client.ErrUnknownWorkflow), err == nil && st.Ledger == "" && st.Temporal == "":
		notFound(w, id)
		return
	case err != nil:
		s.o.Logger.Warn("reading a workflow's status failed", "workflow_id", id, "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the ledger or Temporal did not answer", nil)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// owns says whether p may read workflow id: p's tenant's own workflows
// (activity-{route}:@{tenant}/...) only; the anonymous principal any.
func owns(p *Principal, id string) bool {
	if p.Tenant == "" {
		return true
	}
	rest, ok := strings.CutPrefix(id, "activity-")
	if !ok {
		return false
	}
	_, eventID, ok := strings.Cut(rest, ":")
	return ok && eventid.TenantOf(eventID) == p.Tenant
}

// notFound is the one answer for a workflow ID this caller cannot read:
// no route makes it, no router claimed it and Temporal has no run of it,
// or another tenant's. The same body for all, so that it tells nothing.
// (An event just accepted answers it too until a router claims it,
// usually well under a second.)
func notFound(w http.ResponseWriter, id string) {
	writeProblem(w, http.StatusNotFound, "unknown_workflow", fmt.Sprintf("no workflow %q that this caller may read", id), nil)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
