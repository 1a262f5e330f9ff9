package ingress

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
)

// POST /v1/events: one event in, its workflows out (202).

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

// events takes one event: read it, scope it to the caller's tenant,
// prepare it (decode and route, as a router will), check what the caller
// may send, then, under the key's lock until answered, write it and
// answer 202. Each step
// answers the request itself when it refuses, and returns false.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	rec, key, ok := readEvent(w, r)
	if !ok {
		return
	}
	pr := principalOf(r)
	scopeToTenant(rec, pr)
	p, ok := s.prepare(w, rec)
	if !ok || !s.mayAccept(w, pr, p, key) {
		return
	}
	release, ok := s.lock(w, r, p)
	if !ok {
		return
	}
	// Released however the request ends, a panic included: a lock
	// left held would answer 409 for this key on every replica.
	defer release()
	if s.o.Locked != nil {
		s.o.Locked(p.Event.ID)
	}
	h, ok := s.send(w, r, p)
	if !ok {
		return
	}
	s.writeAccepted(w, h)
}

// readEvent turns the request into a Kafka record, and the
// Idempotency-Key it carries ("" without one).
func readEvent(w http.ResponseWriter, r *http.Request) (*kgo.Record, string, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeProblem(w, http.StatusMethodNotAllowed, "method_not_allowed", "POST an event", nil)
		return nil, "", false
	}
	body, _ := r.Context().Value(bodyKey{}).([]byte) // read by instrument (readBody)
	rec, _, key, err := toRecord(r.Header, body)
	switch {
	case errors.Is(err, errMediaType):
		w.Header().Set("Accept-Post", acceptPost)
		writeProblem(w, http.StatusUnsupportedMediaType, "unsupported_media_type", err.Error(), nil)
		return nil, "", false
	case errors.As(err, new(*keyError)):
		writeProblem(w, http.StatusBadRequest, "invalid_id", err.Error(), nil)
		return nil, "", false
	case err != nil:
		writeProblem(w, http.StatusBadRequest, "undecodable", err.Error(), nil)
		return nil, "", false
	}
	return rec, key, true
}

// scopeToTenant makes rec the event of pr's tenant, if it has one.
func scopeToTenant(rec *kgo.Record, pr *Principal) {
	if pr.Tenant == "" {
		return
	}
	// The tenant scopes the event's ID (eventid.TenantHeader): the
	// request cannot set this header (only ce-* headers are copied),
	// and Prepare signs the record with the tenant keyring, without
	// which the routers dead-letter it (forged_tenant).
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: eventid.TenantHeader, Value: []byte(pr.Tenant)})
	if rec.Key != nil {
		rec.Key = []byte(eventid.ScopedID(pr.Tenant, string(rec.Key))) // the record key is the event ID
	}
}

// prepare decodes and routes rec as a router will.
func (s *Server) prepare(w http.ResponseWriter, rec *kgo.Record) (*client.Prepared, bool) {
	p, err := s.c.Prepare(rec)
	var invalid *client.InvalidEventError
	switch {
	case errors.As(err, &invalid) && invalid.Reason == string(decide.ReasonForgedTenant):
		// The ingress could not sign its caller's record (the tenant
		// keyring has no good keys: a file broken after a good read keeps
		// its last ones): ours to fix, not the caller's.
		s.o.Logger.Error("signing a tenant's record failed: check kafka.tenant_keys_file", "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the ingress cannot sign this tenant's event now; retry", nil)
		return nil, false
	case errors.As(err, &invalid) && invalid.Reason == string(decide.ReasonOversized):
		writeProblem(w, http.StatusRequestEntityTooLarge, invalid.Reason, invalid.Error(), nil)
		return nil, false
	case errors.As(err, &invalid):
		writeProblem(w, http.StatusBadRequest, invalid.Reason, invalid.Error(), nil)
		return nil, false
	case errors.Is(err, client.ErrNoKey):
		writeProblem(w, http.StatusBadRequest, "no_id", err.Error()+": send an Idempotency-Key header (or a CloudEvents id)", nil)
		return nil, false
	case err != nil:
		writeProblem(w, http.StatusBadRequest, "undecodable", err.Error(), nil)
		return nil, false
	}
	return p, true
}

// mayAccept checks the event against the ingress's key rule and what pr
// may send: its type, its routes, and the key against the event's ID.
func (s *Server) mayAccept(w http.ResponseWriter, pr *Principal, p *client.Prepared, key string) bool {
	if key == "" && !s.o.AllowNoKey && p.Event.Rule != eventid.RuleHeader && p.Event.Rule != eventid.RuleField {
		writeProblem(w, http.StatusBadRequest, "no_key",
			"an Idempotency-Key header is required (RFC 8941 sf-string, e.g. Idempotency-Key: \"order-123\"), or a CloudEvents id; "+
				"IDs derived from content are off (ingress.require_key)", nil)
		return false
	}
	if !pr.MayType(p.Event.Type) {
		writeProblem(w, http.StatusForbidden, "forbidden", fmt.Sprintf("this token may not send events of type %q (event_types)", p.Event.Type), nil)
		return false
	}
	for _, tg := range p.Targets {
		switch {
		case pr.Tenant != "" && tg.Route.Mode == decide.ModeSignal:
			writeProblem(w, http.StatusForbidden, "forbidden",
				fmt.Sprintf("route %s signals an entity workflow named by the event's data, not by the event: tenants cannot send to it", tg.Route.ID), nil)
			return false
		case pr.Tenant != "" && tg.Route.Key == decide.KeyScheduledFor:
			writeProblem(w, http.StatusForbidden, "forbidden",
				fmt.Sprintf("route %s keys its workflows by scheduled_for, not by event: tenants cannot start it", tg.Route.ID), nil)
			return false
		case !pr.MayRoute(tg.Route.ID):
			writeProblem(w, http.StatusForbidden, "forbidden", fmt.Sprintf("this token may not start route %s (routes)", tg.Route.ID), nil)
			return false
		}
	}
	if key != "" && p.Event.ID != eventid.ScopedID(pr.Tenant, key) {
		writeProblem(w, http.StatusBadRequest, "key_mismatch",
			fmt.Sprintf("the event's ID is %q (rule %s), not the Idempotency-Key: send one or the other, or the same", p.Event.ID, p.Event.Rule),
			func(pr *problem) { pr.EventID = p.Event.ID })
		return false
	}
	return true
}

// lock takes the event's key lock, held until the request is answered.
func (s *Server) lock(w http.ResponseWriter, r *http.Request, p *client.Prepared) (func(), bool) {
	release, err := s.o.Locks.Acquire(r.Context(), p.Event.ID)
	switch {
	case errors.Is(err, ErrInFlight):
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusConflict, "in_flight", "a request with this idempotency key is being answered; retry once it is",
			func(pr *problem) { pr.EventID = p.Event.ID })
		return nil, false
	case err != nil:
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", err.Error(), nil)
		return nil, false
	}
	return release, true
}

// send writes the event to Kafka (under its key's lock).
func (s *Server) send(w http.ResponseWriter, r *http.Request, p *client.Prepared) (*client.Handle, bool) {
	ctx, cancel := context.WithTimeout(traceContext(r, s.o.Propagator), s.o.ProduceTimeout)
	h, err := s.c.Send(ctx, p)
	cancel()
	var conflict *client.ConflictError
	var invalid *client.InvalidEventError
	switch {
	case errors.As(err, &conflict):
		writeProblem(w, http.StatusUnprocessableEntity, "conflict",
			"the Idempotency-Key was used before with another payload; the first one's workflows keep it, and this request starts nothing",
			func(pr *problem) { pr.EventID, pr.WorkflowIDs = conflict.EventID, conflict.WorkflowIDs })
		return nil, false
	case errors.As(err, &invalid):
		// Kafka refused the record as too large: permanent, not a 503.
		writeProblem(w, http.StatusRequestEntityTooLarge, invalid.Reason, invalid.Error(), func(pr *problem) { pr.EventID = p.Event.ID })
		return nil, false
	case err != nil:
		s.o.Logger.Warn("writing an event to kafka failed", "event_id", p.Event.ID, "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "unavailable",
			"Kafka did not acknowledge the event in time; it may or may not have been written: retry with the same key", nil)
		return nil, false
	}
	return h, true
}

// writeAccepted answers 202 with the event's workflows.
func (s *Server) writeAccepted(w http.ResponseWriter, h *client.Handle) {
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
