package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/schemas"
)

// Options configure a Server.
type Options struct {
	// MaxBodyBytes refuses larger bodies (413); at most the routers'
	// kafka.max_value_bytes.
	MaxBodyBytes int
	// Tokens, when set, are the bearer tokens that may call the API.
	Tokens *Tokens
	// PublicURL prefixes status URLs; "": absolute paths.
	PublicURL string
	// ProduceTimeout bounds the wait for Kafka's acknowledgement.
	ProduceTimeout time.Duration
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
}

type metrics struct {
	requests *prometheus.CounterVec   // api, code
	seconds  *prometheus.HistogramVec // api
	degraded prometheus.Counter
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
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dedup_ingress_requests_total",
			Help: "Ingress API requests by API (events, workflows) and status code."}, []string{"api", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "dedup_ingress_request_duration_seconds",
			Help: "Ingress API request latency (for events: until Kafka acknowledged).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, []string{"api"}),
		degraded: prometheus.NewCounter(prometheus.CounterOpts{Name: "dedup_ingress_lock_degraded_total",
			Help: "Requests whose in-flight lock was taken in this process only, because PostgreSQL failed (no 409 across replicas for them)."}),
	}
	for _, col := range []prometheus.Collector{m.requests, m.seconds, m.degraded} {
		if err := o.Registry.Register(col); err != nil {
			return nil, fmt.Errorf("registering ingress metrics: %w", err)
		}
	}
	if o.Locks == nil {
		o.Locks = NewLocks("", o.Logger, m.degraded)
	} else {
		o.Locks.degraded = m.degraded
	}
	s := &Server{c: c, o: o, mux: http.NewServeMux(), m: m}
	s.mux.HandleFunc("/v1/events", s.instrument("events", s.events))
	s.mux.HandleFunc("/v1/workflows/{id...}", s.instrument("workflows", s.workflow))
	s.mux.HandleFunc("GET /v1/openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(schemas.OpenAPI)
	})
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, "not_found", "no such resource: "+r.URL.Path, nil)
	})
	return s, nil
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

// instrument counts and times a handler, and checks the bearer token.
func (s *Server) instrument(api string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		if s.o.Tokens != nil && !s.o.Tokens.allowed(r.Header.Get("Authorization")) {
			sw.Header().Set("WWW-Authenticate", `Bearer realm="dedup"`)
			writeProblem(sw, http.StatusUnauthorized, "unauthorized", "a bearer token from ingress.tokens_file is required", nil)
		} else {
			h(sw, r)
		}
		if sw.code == 0 {
			sw.code = http.StatusOK
		}
		s.m.requests.WithLabelValues(api, strconv.Itoa(sw.code)).Inc()
		s.m.seconds.WithLabelValues(api).Observe(time.Since(t0).Seconds())
	}
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
	if r.ContentLength > int64(s.o.MaxBodyBytes) {
		writeProblem(w, http.StatusRequestEntityTooLarge, "oversized",
			fmt.Sprintf("the body is %d bytes, over ingress.max_body_bytes %d", r.ContentLength, s.o.MaxBodyBytes), nil)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.o.MaxBodyBytes)))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeProblem(w, http.StatusRequestEntityTooLarge, "oversized", fmt.Sprintf("the body is over ingress.max_body_bytes %d", s.o.MaxBodyBytes), nil)
		return
	case err != nil:
		writeProblem(w, http.StatusBadRequest, "undecodable", "reading the body: "+err.Error(), nil)
		return
	}
	rec, _, key, err := toRecord(r.Header, body)
	switch {
	case errors.Is(err, errMediaType):
		w.Header().Set("Accept-Post", acceptPost)
		writeProblem(w, http.StatusUnsupportedMediaType, "unsupported_media_type", err.Error(), nil)
		return
	case errors.Is(err, errKey):
		writeProblem(w, http.StatusBadRequest, "invalid_id", err.Error(), nil)
		return
	case err != nil:
		writeProblem(w, http.StatusBadRequest, "undecodable", err.Error(), nil)
		return
	}
	p, err := s.c.Prepare(rec)
	var invalid *client.InvalidEventError
	switch {
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
	if key != "" && p.Event.ID != key {
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
	if s.o.Locked != nil {
		s.o.Locked(p.Event.ID)
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.o.ProduceTimeout)
	h, err := s.c.Send(ctx, p)
	cancel()
	release()
	var conflict *client.ConflictError
	switch {
	case errors.As(err, &conflict):
		writeProblem(w, http.StatusUnprocessableEntity, "conflict",
			"the Idempotency-Key was used before with another payload; the first one's workflows keep it, and this request starts nothing",
			func(pr *problem) { pr.EventID, pr.WorkflowIDs = conflict.EventID, conflict.WorkflowIDs })
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
	writeJSON(w, http.StatusAccepted, body202)
}

func (s *Server) workflow(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeProblem(w, http.StatusMethodNotAllowed, "method_not_allowed", "GET a workflow's status", nil)
		return
	}
	id := r.PathValue("id")
	st, err := s.c.Status(r.Context(), id)
	switch {
	case errors.Is(err, client.ErrUnknownWorkflow):
		writeProblem(w, http.StatusNotFound, "unknown_workflow", err.Error(), nil)
		return
	case err != nil:
		s.o.Logger.Warn("reading a workflow's status failed", "workflow_id", id, "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the ledger or Temporal did not answer", nil)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
