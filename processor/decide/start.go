package decide

import (
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/schemas"
)

// Run is what the router needs to know of a workflow's latest run to
// decide whether a redelivered event may run it again.
type Run struct {
	ID     string
	Closed bool
	// Failed: closed as failed, timed out, terminated or cancelled.
	Failed bool
	// Generation is the generation the run was started for (the starter
	// records it with the run); 0 for a run that did not say.
	Generation int
}

// StartRequest is one workflow start.
type StartRequest struct {
	// Namespace is the route's Temporal namespace; empty: the starter's
	// default.
	Namespace    string
	WorkflowID   string
	WorkflowType string
	TaskQueue    string
	ReusePolicy  ReusePolicy
	// Generation is which run of the workflow ID this start is for: 1 (or
	// 0) for the first, one more for each re-run. Every start of one
	// generation is one start to Temporal (the starter derives its request
	// ID from it, and records the generation with the run, where LastRun
	// reads it back), however often it is retried or re-driven.
	Generation int
	Input      schemas.WorkflowInput
	// Signal, when set, makes the request a signal route's delivery
	// rather than a start: WorkflowID is then the delivery key (the
	// ledger's, signal-{route}:{event_id}: the one the start pool
	// coalesces and the marker marks), Input is unused, and the starter
	// signals Signal.WorkflowID with SignalWithStart, starting it
	// (WorkflowType, TaskQueue, ReusePolicy, no input) if no run is open.
	Signal *SignalRequest
	// Record is the Kafka record whose claim this start is (the copy that
	// starts it), recorded with the run as search attributes
	// (DedupKafkaTopic, …); nil for a scheduler's fire.
	Record *RecordRef
}

// RecordRef is a Kafka record's coordinates.
type RecordRef struct {
	Topic     string
	Partition int32
	Offset    int64
}

// SignalRequest is the signal half of a signal route's delivery.
type SignalRequest struct {
	// WorkflowID is the entity workflow's ID (the route's template).
	WorkflowID string
	// Name is the signal's name (the route's signal).
	Name  string
	Input schemas.SignalEvent
}

// EventID is the event the request is for, for logs and dead letters.
func (r *StartRequest) EventID() string {
	if r.Signal != nil {
		return r.Signal.Input.EventID
	}
	return r.Input.EventID
}

// IDRule is how the request's event ID was obtained.
func (r *StartRequest) IDRule() string {
	if r.Signal != nil {
		return r.Signal.Input.IDRule
	}
	return r.Input.IDRule
}

// NewSignalRequest is signal route rt's delivery of event ev into the
// entity workflow entity: the request's WorkflowID is the delivery key.
// A delivery is always of generation 1: a delivered event is never
// delivered again (Route.MayRerun), so its request ID is one per key.
func NewSignalRequest(rt *Route, ev *eventid.Event, entity string) StartRequest {
	key := DeliveryKey(rt.ID, ev.ID)
	return StartRequest{
		Namespace: rt.Namespace, WorkflowID: key, WorkflowType: rt.WorkflowType, TaskQueue: rt.TaskQueue, ReusePolicy: rt.IDReusePolicy,
		Signal: &SignalRequest{WorkflowID: entity, Name: rt.Signal, Input: schemas.SignalEvent{
			EventID: ev.ID, DeliveryID: key, ActivityID: rt.ID, WorkflowID: entity, IDRule: string(ev.Rule),
			Type: ev.Type, Source: ev.Source, Subject: ev.Subject, Time: ev.Time, Data: ev.Data, DataBase64: ev.Bytes,
			DataContentType: ev.ContentType}},
	}
}

// NewStartRequest is the start of route rt's workflow wid for event ev.
func NewStartRequest(rt *Route, ev *eventid.Event, wid string) StartRequest {
	return StartRequest{
		Namespace: rt.Namespace, WorkflowID: wid, WorkflowType: rt.WorkflowType, TaskQueue: rt.TaskQueue, ReusePolicy: rt.IDReusePolicy,
		Input: schemas.WorkflowInput{WorkflowID: wid, ActivityID: rt.ID, EventID: ev.ID, IDRule: string(ev.Rule),
			Type: ev.Type, Source: ev.Source, Time: ev.Time, Data: ev.Data, DataBase64: ev.Bytes, DataContentType: ev.ContentType,
			Definition: rt.Definition, TriggerKind: schemas.TriggerEvent},
	}
}
