package decide

import "github.com/dedupio/dedup/processor/eventid"

// Reason is why a record was dead-lettered: the value of the dedup-reason
// header, of the reason column of dedup_dead_letters and of the reason
// label of dedup_dead_letters_total. Reasons lists every one.
type Reason string

// The decoder's reasons are eventid's (it cannot import this package);
// the rest are the router's.
const (
	ReasonUndecodable              = Reason(eventid.ReasonUndecodable)  // not JSON, or a field of the wrong type
	ReasonMissingType              = Reason(eventid.ReasonMissingType)  // no event type to route on
	ReasonInvalidID                = Reason(eventid.ReasonInvalidID)    // an ID header or field that is present but unusable
	ReasonNoID                     = Reason(eventid.ReasonNoID)         // no rule of the ID chain produced an ID
	ReasonForgedTenant             = Reason(eventid.ReasonForgedTenant) // a dedup-tenant header without the ingress's signature
	ReasonOversized         Reason = "oversized"                        // over max_value_bytes
	ReasonConflict          Reason = "conflict"                         // the workflow ID was claimed with another payload
	ReasonNoRoute           Reason = "no_route"                         // no route matches (no_route: dead_letter)
	ReasonTemporalPermanent Reason = "temporal_permanent"               // Temporal refused the start for good
)

// Reasons is every dead-letter reason, in documentation order.
var Reasons = []Reason{ReasonUndecodable, ReasonMissingType, ReasonInvalidID, ReasonNoID, ReasonForgedTenant, ReasonOversized,
	ReasonConflict, ReasonNoRoute, ReasonTemporalPermanent}
