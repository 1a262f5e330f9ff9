package decide

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Workflow ID keys.
const (
	KeyEventID      = "event_id"
	KeyScheduledFor = "scheduled_for"
)

// The prefixes of dedup's own IDs: a start route's workflow IDs and a
// signal route's delivery keys. No other workflow ID may begin with one
// (Reserved).
const (
	startPrefix    = "activity-"
	deliveryPrefix = "signal-"
)

// WorkflowID is activity-{activityID}:{key}, the seed contract's format.
func WorkflowID(activityID, key string) string {
	return startPrefix + activityID + ":" + key
}

// DeliveryKey is the ledger key of a signal route's delivery of one
// event, signal-{activityID}:{eventID}: the "workflow ID" its ledger row
// is claimed under. It is not a Temporal workflow ID (the entity's is the
// template's): the prefix keeps it apart from every start route's
// activity-{id}:{key}, and route IDs are unique across modes. It names
// the route and the event, not the entity, so that one event ID is one
// delivery per route whatever its data says: a copy with another payload
// is a conflict even if that payload would name another entity, and a
// changed template does not deliver old events again.
func DeliveryKey(activityID, eventID string) string {
	return deliveryPrefix + activityID + ":" + eventID
}

// ParsedWorkflowID is a workflow ID of dedup's own, split.
type ParsedWorkflowID struct {
	// Signal: a signal route's delivery key (signal-{route}:{event_id});
	// else a start route's workflow ID (activity-{route}:{key}).
	Signal bool
	// Route is the route's ID (the activity ID).
	Route string
	// Key is the second half: the event ID, or a scheduled_for route's
	// slot key (ScheduledForKey).
	Key string
}

// ParseWorkflowID splits id, the inverse of WorkflowID and DeliveryKey;
// ok is false for an ID neither made (an entity workflow's, anyone
// else's). Route IDs have no colon, so the first colon ends the route.
// It is the one parser of dedup's IDs: Routes.RouteOf, a scheduled
// start's slot (Decision.Start) and the ingress's tenant check use it.
func ParseWorkflowID(id string) (p ParsedWorkflowID, ok bool) {
	rest, ok := strings.CutPrefix(id, startPrefix)
	if !ok {
		if rest, ok = strings.CutPrefix(id, deliveryPrefix); !ok {
			return ParsedWorkflowID{}, false
		}
		p.Signal = true
	}
	if p.Route, p.Key, ok = strings.Cut(rest, ":"); !ok {
		return ParsedWorkflowID{}, false
	}
	return p, true
}

// Reserved says whether id begins with a prefix of dedup's own IDs
// (activity-, signal-), with or without the rest of their form: no entity
// workflow of a signal route may be named so (ErrWorkflowIDReserved).
func Reserved(id string) bool {
	return strings.HasPrefix(id, startPrefix) || strings.HasPrefix(id, deliveryPrefix)
}

// MaxWorkflowIDBytes is Temporal's default limit on a workflow ID
// (the dynamic config limit.maxIDLength): a longer one is refused for good.
const MaxWorkflowIDBytes = 1000

// ErrWorkflowIDTooLong is the error of an event whose workflow ID would be over
// MaxWorkflowIDBytes; the router dead-letters it before any claim, as
// invalid_id.
var ErrWorkflowIDTooLong = errors.New("workflow ID too long")

// ErrWorkflowIDReserved is the error of a signal route's entity workflow
// ID that its template rendered with a prefix of dedup's own IDs
// (activity-, signal-): dead-lettered as invalid_id.
var ErrWorkflowIDReserved = errors.New("workflow ID reserved")

// ScheduledForKey formats a slot's nominal time the way the seed
// contract's example does (Python's isoformat of an aware UTC datetime):
// 2026-03-01T09:00:00+00:00, with microseconds only when the time has a
// fraction. It is the second half of a scheduled workflow ID,
// activity-{id}:{scheduled_for}; the scheduler (processor/schedule) and
// routes with key scheduled_for both use it, so they agree on the ID.
func ScheduledForKey(t time.Time) string {
	t = t.UTC()
	if t.Nanosecond() != 0 {
		return t.Format("2006-01-02T15:04:05.000000+00:00")
	}
	return t.Format("2006-01-02T15:04:05+00:00")
}

// SlotPayloadHash is the payload hash a scheduled slot is claimed with:
// SHA-256 over the activity ID and the slot's key, nothing else. A slot is
// one run whoever fires it, so every fire of it (two schedulers, a retry,
// dedup's scheduler and an event routed with key scheduled_for, two
// events of one slot whose data differ) hashes equal: a duplicate, never a
// conflict. The first claim's input is the one that runs.
func SlotPayloadHash(activityID, key string) [32]byte {
	return sha256.Sum256([]byte("dedup-slot\x00" + activityID + "\x00" + key))
}

// scheduledFor reads data.scheduled_for (RFC 3339) and formats it with
// ScheduledForKey. Two spellings of one instant (09:00:00Z,
// 10:00:00+01:00) give one key.
func scheduledFor(data json.RawMessage) (string, error) {
	var v struct {
		ScheduledFor *string `json:"scheduled_for"`
	}
	if err := json.Unmarshal(data, &v); err != nil || v.ScheduledFor == nil {
		return "", fmt.Errorf("data.scheduled_for is missing or not a string")
	}
	t, err := time.Parse(time.RFC3339Nano, *v.ScheduledFor)
	if err != nil {
		return "", fmt.Errorf("data.scheduled_for: %w", err)
	}
	return ScheduledForKey(t), nil
}
