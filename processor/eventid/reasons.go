package eventid

import (
	"errors"
	"fmt"
)

// Decode reasons: why a record is refused (or, a tombstone, skipped).

// Reason says why a record was rejected. It goes into the dead-letter
// record's headers and into metric labels, so the set is small and fixed.
type Reason string

// The reasons a record is rejected (or, for ReasonTombstone, skipped).
const (
	ReasonUndecodable Reason = "undecodable"  // value is not JSON or not the expected shape
	ReasonMissingType Reason = "missing_type" // no event type, or not a non-empty string
	ReasonInvalidID   Reason = "invalid_id"   // an ID is present but unusable
	ReasonNoID        Reason = "no_id"        // no rule of the chain produced an ID
	// ReasonForgedTenant: the record carries the tenant header
	// (TenantHeader) without a signature the keyring verifies: only dedup
	// ingress may speak for a tenant.
	ReasonForgedTenant Reason = "forged_tenant"
	// ReasonTombstone is not a dead-letter reason: the record has a null
	// value (log compaction's delete marker) and no CloudEvents headers, so
	// it is no event at all. The router skips and counts it. (A binary-mode
	// CloudEvent with a null value is an event without data, not a
	// tombstone.)
	ReasonTombstone Reason = "tombstone"
)

// Error is a permanent decoding failure: retrying the same bytes gives the
// same error.
type Error struct {
	Reason Reason
	Err    error
}

func (e *Error) Error() string { return string(e.Reason) + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func fail(r Reason, format string, args ...any) error {
	return &Error{Reason: r, Err: fmt.Errorf(format, args...)}
}

// ReasonOf returns the Reason of a decoding error, or "" if err is not one.
func ReasonOf(err error) Reason {
	if err == nil {
		return "" // and no allocation: the router asks of every record
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}
