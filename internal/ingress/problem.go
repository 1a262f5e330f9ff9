package ingress

import (
	"encoding/json"
	"net/http"
)

// problem is an RFC 9457 problem details object, with dedup's extensions.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Reason is the machine-readable cause (undecodable, missing_type,
	// invalid_id, no_id, no_route, oversized, key_mismatch, conflict,
	// in_flight, unsupported_media_type, unauthorized, unavailable,
	// unknown_workflow, no_key, forbidden, rate_limited, overloaded).
	Reason      string   `json:"reason"`
	EventID     string   `json:"event_id,omitempty"`
	WorkflowIDs []string `json:"workflow_ids,omitempty"`
}

// problemType is the problem's type URI: one per reason.
func problemType(reason string) string { return "urn:dedup:problem:" + reason }

func writeProblem(w http.ResponseWriter, status int, reason, detail string, extra func(*problem)) {
	p := problem{Type: problemType(reason), Title: http.StatusText(status), Status: status, Detail: detail, Reason: reason}
	if extra != nil {
		extra(&p)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	// The documentation of every answer (the Idempotency-Key draft's
	// "link pointing to relevant documentation", §2.7).
	w.Header().Set("Link", `</v1/openapi.yaml>; rel="describedby"; type="application/yaml"`)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}
