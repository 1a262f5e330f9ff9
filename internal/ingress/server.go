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
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/processor"
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

// accepted is the 202 body: a function of the request alone, so that the
// same request again gets the same answer.
type accepted struct {
	EventID   string             `json:"event_id"`
	IDRule    string             `json:"id_rule"`
	Workflows []acceptedWorkflow `json:"workflows"`
}

type acceptedWorkflow struct {
	WorkflowID string `json:"workflow_id"`
	ActivityID string `json:"activity_id"`
	Namespace  string `json:"namespace"`
	StatusURL  string `json:"status_url"`
}

func (s *Server) statusURL(workflowID string) string {
	return strings.TrimSuffix(s.o.PublicURL, "/") + "/v1/workflows/" + url.PathEscape(workflowID)
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeProblem(w, http.StatusMethodNotAllowed, "method_not_allowed", "POST an event", nil)
		return
	}
	body, _ := r.Context().Value(bodyKey{}).([]byte) // read by instrument (readBody)
	rec, _, key, err := toRecord(r.Header, body)
	switch {
	case errors.Is(err, errMediaType):
		w.Header().Set("Accept-Post", acceptPost)
		writeProblem(w, http.StatusUnsupportedMediaType, "unsupported_media_type", err.Error(), nil)
		return
	case errors.As(err, new(*keyError)):
		writeProblem(w, http.StatusBadRequest, "invalid_id", err.Error(), nil)
		return
	case err != nil:
		writeProblem(w, http.StatusBadRequest, "undecodable", err.Error(), nil)
		return
	}
	pr := principalOf(r)
	if pr.Tenant != "" {
		// The tenant scopes the event's ID (eventid.TenantHeader): the
		// request cannot set this header (only ce-* headers are copied),
		// and Prepare signs the record with the tenant keyring, without
		// which the routers dead-letter it (forged_tenant).
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: eventid.TenantHeader, Value: []byte(pr.Tenant)})
		if rec.Key != nil {
			rec.Key = []byte(eventid.ScopedID(pr.Tenant, string(rec.Key))) // the record key is the event ID
		}
	}
	p, err := s.c.Prepare(rec)
	var invalid *client.InvalidEventError
	switch {
	case errors.As(err, &invalid) && invalid.Reason == string(processor.ReasonForgedTenant):
		// The ingress could not sign its caller's record (the tenant
		// keyring has no good keys: a file broken after a good read keeps
		// its last ones): ours to fix, not the caller's.
		s.o.Logger.Error("signing a tenant's record failed: check kafka.tenant_keys_file", "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the ingress cannot sign this tenant's event now; retry", nil)
		return
	case errors.As(err, &invalid) && invalid.Reason == string(processor.ReasonOversized):
		writeProblem(w, http.StatusRequestEntityTooLarge, invalid.Reason, invalid.Error(), nil)
		return
	case errors.As(err, &invalid):
		writeProblem(w, http.StatusBadRequest, invalid.Reason, invalid.Error(), nil)
		return
	case errors.Is(err, client.ErrNoKey):
		writeProblem(w, http.StatusBadRequest, "no_id", err.Error()+": send an Idempotency-Key header (or a CloudEvents id)", nil)
		return
	case err != nil:
		writeProblem(w, http.StatusBadRequest, "undecodable", err.Error(), nil)
		return
	}
	if key == "" && !s.o.AllowNoKey && p.Event.Rule != eventid.RuleHeader && p.Event.Rule != eventid.RuleField {
		writeProblem(w, http.StatusBadRequest, "no_key",
			"an Idempotency-Key header is required (RFC 8941 sf-string, e.g. Idempotency-Key: \"order-123\"), or a CloudEvents id; "+
				"IDs derived from content are off (ingress.require_key)", nil)
		return
	}
	if !pr.MayType(p.Event.Type) {
		writeProblem(w, http.StatusForbidden, "forbidden", fmt.Sprintf("this token may not send events of type %q (event_types)", p.Event.Type), nil)
		return
	}
	for _, tg := range p.Targets {
		switch {
		case pr.Tenant != "" && tg.Route.Mode == processor.ModeSignal:
			writeProblem(w, http.StatusForbidden, "forbidden",
				fmt.Sprintf("route %s signals an entity workflow named by the event's data, not by the event: tenants cannot send to it", tg.Route.ID), nil)
			return
		case pr.Tenant != "" && tg.Route.Key == processor.KeyScheduledFor:
			writeProblem(w, http.StatusForbidden, "forbidden",
				fmt.Sprintf("route %s keys its workflows by scheduled_for, not by event: tenants cannot start it", tg.Route.ID), nil)
			return
		case !pr.MayRoute(tg.Route.ID):
			writeProblem(w, http.StatusForbidden, "forbidden", fmt.Sprintf("this token may not start route %s (routes)", tg.Route.ID), nil)
			return
		}
	}
	if key != "" && p.Event.ID != eventid.ScopedID(pr.Tenant, key) {
		writeProblem(w, http.StatusBadRequest, "key_mismatch",
			fmt.Sprintf("the event's ID is %q (rule %s), not the Idempotency-Key: send one or the other, or the same", p.Event.ID, p.Event.Rule),
			func(pr *problem) { pr.EventID = p.Event.ID })
		return
	}
	release, err := s.o.Locks.Acquire(r.Context(), p.Event.ID)
	switch {
	case errors.Is(err, ErrInFlight):
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusConflict, "in_flight", "a request with this idempotency key is being answered; retry once it is",
			func(pr *problem) { pr.EventID = p.Event.ID })
		return
	case err != nil:
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", err.Error(), nil)
		return
	}
	// Released however the request ends, a panic included: a lock
	// left held would answer 409 for this key on every replica.
	defer release()
	if s.o.Locked != nil {
		s.o.Locked(p.Event.ID)
	}
	ctx, cancel := context.WithTimeout(traceContext(r, s.o.Propagator), s.o.ProduceTimeout)
	h, err := s.c.Send(ctx, p)
	cancel()
	var conflict *client.ConflictError
	switch {
	case errors.As(err, &conflict):
		writeProblem(w, http.StatusUnprocessableEntity, "conflict",
			"the Idempotency-Key was used before with another payload; the first one's workflows keep it, and this request starts nothing",
			func(pr *problem) { pr.EventID, pr.WorkflowIDs = conflict.EventID, conflict.WorkflowIDs })
		return
	case errors.As(err, &invalid):
		// Kafka refused the record as too large: permanent, not a 503.
		writeProblem(w, http.StatusRequestEntityTooLarge, invalid.Reason, invalid.Error(), func(pr *problem) { pr.EventID = p.Event.ID })
		return
	case err != nil:
		s.o.Logger.Warn("writing an event to kafka failed", "event_id", p.Event.ID, "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "unavailable",
			"Kafka did not acknowledge the event in time; it may or may not have been written: retry with the same key", nil)
		return
	}
	body202 := accepted{EventID: h.EventID, IDRule: string(h.IDRule)}
	for _, wf := range h.Workflows {
		body202.Workflows = append(body202.Workflows, acceptedWorkflow{WorkflowID: wf.ID, ActivityID: wf.ActivityID, Namespace: wf.Namespace, StatusURL: s.statusURL(wf.ID)})
	}
	if len(body202.Workflows) == 1 {
		w.Header().Set("Location", body202.Workflows[0].StatusURL)
	}
	if h.Repeat {
		// The ledger held every workflow of the event with this payload:
		// this answer replays the first one's.
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusAccepted, body202)
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
