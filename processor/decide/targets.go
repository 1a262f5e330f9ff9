package decide

import (
	"fmt"

	"github.com/dedupio/dedup/processor/eventid"
)

// Target is one workflow an event starts: the route and its workflow ID,
// activity-{route id}:{Key}; or, for a signal route, one delivery: its
// ledger key WorkflowID, signal-{route id}:{Key} (DeliveryKey), and the
// entity workflow the event is signalled into.
type Target struct {
	Route      *Route
	WorkflowID string
	// Key is the workflow ID's second half: the event ID, or the
	// normalised data.scheduled_for of a scheduled_for route.
	Key string
	// Entity is a signal route's entity workflow ID (its template,
	// rendered); empty for a start route.
	Entity string
}

// Targets returns the workflows ev starts, one per matching route, in
// table order; none when no route matches. It is the one place that turns
// a decoded event into workflow IDs: Decider.Decide uses it (through
// targetsOf, on the routes it matched), for the router, the operators'
// tools and the producer client (package client) alike, so that they always
// agree. An error means the event can never
// start (a scheduled_for route whose data has no usable time): the router
// dead-letters the record as undecodable.
func (rs Routes) Targets(ev *eventid.Event) ([]Target, error) {
	return targetsOf(rs.Match(ev), ev)
}

// targetsOf are the targets of ev's matching routes (Routes.Match).
func targetsOf(routes []*Route, ev *eventid.Event) ([]Target, error) {
	if len(routes) == 0 {
		return nil, nil
	}
	out := make([]Target, len(routes))
	for i, rt := range routes {
		t, err := targetOf(rt, ev)
		if err != nil {
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}

// targetOf is the target of ev on route rt, which matches it.
func targetOf(rt *Route, ev *eventid.Event) (Target, error) {
	if rt.Mode == ModeSignal {
		t, err := rt.Template()
		if err != nil {
			return Target{}, err
		}
		entity, err := t.Render(rt.ID, ev.Data)
		if err != nil {
			return Target{}, fmt.Errorf("route %s: %w", rt.ID, err)
		}
		return Target{Route: rt, WorkflowID: DeliveryKey(rt.ID, ev.ID), Key: ev.ID, Entity: entity}, nil
	}
	key := ev.ID
	if rt.Key == KeyScheduledFor {
		var err error
		if key, err = scheduledFor(ev.Data); err != nil {
			return Target{}, fmt.Errorf("route %s: %w", rt.ID, err)
		}
	}
	wid := WorkflowID(rt.ID, key)
	if len(wid) > MaxWorkflowIDBytes {
		return Target{}, fmt.Errorf("%w: route %s makes a workflow ID of %d bytes, over Temporal's %d (limit.maxIDLength): "+
			"a shorter event ID (event_id.max_id_length), tenant or route ID", ErrWorkflowIDTooLong, rt.ID, len(wid), MaxWorkflowIDBytes)
	}
	return Target{Route: rt, WorkflowID: wid, Key: key}, nil
}

// RouteOf returns the route whose workflow IDs look like workflowID
// (activity-{route id}:..., or a signal route's delivery key
// signal-{route id}:...), or nil. Route IDs have no colon, so the prefix
// names one route at most.
func (rs Routes) RouteOf(workflowID string) *Route {
	p, ok := ParseWorkflowID(workflowID)
	if !ok {
		return nil
	}
	for i := range rs {
		if rs[i].ID == p.Route && (rs[i].Mode == ModeSignal) == p.Signal {
			return &rs[i]
		}
	}
	return nil
}
