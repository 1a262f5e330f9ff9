// Package srdecode reads values in the Confluent Schema Registry wire
// format (a zero magic byte, a 4-byte big-endian schema ID, for Protobuf
// the message indexes, then the encoded record) as the record's logical
// value in JSON, so that they go down the JSON path of the router: the
// event ID field, route match, templates and the content rule.
//
// Its guarantees:
//
//   - Decode is pure: no I/O, no clock. It reads schemas that Resolve put
//     in the cache before; a schema ID not resolved yet is ErrUnresolved
//     (the router resolves a poll batch before it decides it).
//   - Schemas are cached by ID (a registry never changes what an ID
//     names), up to 4096 (NewBounded: n). So is the registry's "no such
//     schema" (HTTP 404: error_code 40403, or 40401/40402 for a
//     reference), up to 1024 (NewBounded: n),
//     and a schema that does not compile: both make every record that names
//     the ID undecodable, with the ID in the reason. Past the bounds an
//     entry (never one of the batch being resolved) is forgotten and asked
//     again when named: nothing a producer writes grows the cache at will.
//   - Nothing a payload says is allocated or computed before it is
//     checked against the payload or a fixed bound: array items, fixed
//     sizes, decimal digits (avrojson.go); a Protobuf field the schema does
//     not name is an error, not left out.
//   - Resolve returns an error only when the registry could not be asked or
//     did not answer (network, 5xx, 401/403, 429): transient, retried by the
//     caller; nothing is cached then.
//   - The logical value is what the writer's schema says the record holds:
//     Avro written straight from its bytes by the writer's schema
//     (avrojson.go states the form: records in field order, a union as
//     its branch's value or null, bytes as base64, decimals as exact text, longs
//     over 2^53 as strings, strings that are not UTF-8 refused,
//     timestamps as RFC 3339); Protobuf as protojson with the .proto field
//     names, unset fields left out, 64-bit integers as strings (the proto3
//     JSON mapping); JSON Schema payloads as the JSON they are (not
//     validated against the schema: the producer's serializer did).
//
// "The same record" under the content rule is: the same logical value. A
// copy written under another schema version with the same fields and
// values decodes to the same JSON and is the same event. A field added
// with a default is not left out: a copy written under the newer schema
// carries it (with the default) and is a different value (another content
// ID; under the field or header rule, the same ID with another payload: a
// conflict). See docs/schema-registry.md.
package srdecode
