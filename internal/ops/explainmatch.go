package ops

import (
	"github.com/dedupio/dedup/processor/decide"
)

// RouteMiss is a route a decided record does not match, and why: the
// first part of its match (type, source, a field of match.fields) the
// event fails.
type RouteMiss struct {
	Route string `json:"route"`
	Why   string `json:"why"`
}

// routeMisses are the routes d's event does not match, in table order,
// when the event was decoded (none for a record dead-lettered before its
// routes were matched).
func routeMisses(rs decide.Routes, d *decide.Decision) []RouteMiss {
	if d.Event.ID == "" || d.Tombstone {
		return nil
	}
	var out []RouteMiss
	for i := range rs {
		if why := rs[i].Match.Mismatch(&d.Event); why != "" {
			out = append(out, RouteMiss{Route: rs[i].ID, Why: why})
		}
	}
	return out
}
