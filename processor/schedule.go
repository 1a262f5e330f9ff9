package processor

import (
	"encoding/json"
	"fmt"
	"time"
)

// scheduledFor reads data.scheduled_for (RFC 3339) and formats it the way
// the seed contract's example does (Python's isoformat of an aware UTC
// datetime): 2026-03-01T09:00:00+00:00. Two spellings of one instant
// (09:00:00Z, 10:00:00+01:00) give one key.
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
	t = t.UTC()
	if t.Nanosecond() != 0 {
		return t.Format("2006-01-02T15:04:05.000000+00:00"), nil
	}
	return t.Format("2006-01-02T15:04:05+00:00"), nil
}
