package decide

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Workflow ID keys.
const (
	KeyEventID      = "event_id"
	KeyScheduledFor = "scheduled_for"
)

// WorkflowID is activity-{activityID}:{key}, the seed contract's format.
func WorkflowID(activityID, key string) string {
	return "activity-" + activityID + ":" + key
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
	return "signal-" + activityID + ":" + eventID
}

// workflowKey is the key of WorkflowID(activityID, key): its inverse.
func workflowKey(activityID, workflowID string) string {
	return workflowID[len("activity-")+len(activityID)+1:]
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
