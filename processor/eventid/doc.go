// Package eventid gives every Kafka record a stable event ID at the ingress
// boundary, and decodes its envelope.
//
// It is pure: no I/O, no clock, no randomness. The same record bytes (or the
// same event re-produced at another offset, with its JSON keys reordered or
// re-spaced) always decode to the same Event, which is what makes the
// workflow IDs built from it deterministic.
//
// Envelopes: CloudEvents binary mode (ce_* headers, the value is the data:
// JSON, or bytes of any other content type, such as text/plain, Protobuf or
// Avro, kept as they are and identified by their raw bytes),
// CloudEvents structured mode (a JSON object with specversion, id, type,
// source, time, data), or a plain JSON object whose ID, type, source and time
// live at configured fields.
//
// The event ID comes from the first rule of the configured chain that yields
// one (see Rule). Derived IDs never depend on anything but the record:
// RuleContent hashes the RFC 8785 canonical JSON of type, source, data and
// the record key; RuleCoordinates uses topic/partition/offset. The rule that
// produced an ID is returned with it (provenance) and stored in the ledger.
//
// A record that cannot be decoded yields an *Error with a Reason; the caller
// dead-letters it, except a tombstone (ReasonTombstone: a null value without
// CloudEvents headers), which is no event and is skipped. Decode never panics (see FuzzDecode).
package eventid
