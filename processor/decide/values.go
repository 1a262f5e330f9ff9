package decide

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/eventid"
)

// ValueReader reads values written in a schema registry's wire format
// (processor/srdecode: Avro, Protobuf, JSON Schema behind a Confluent
// Schema Registry) as the logical JSON value the rest of the decision
// reads. The decision stays pure: Resolve does the I/O before a batch is
// decided, Decode only reads what Resolve fetched.
type ValueReader interface {
	// Framed reports whether v is in the reader's wire format.
	Framed(v []byte) bool
	// Resolve fetches what decoding vs needs (their schemas). Its error is
	// transient (the registry did not answer); a schema the registry does
	// not have is no error here: Decode then fails.
	Resolve(ctx context.Context, vs [][]byte) error
	// Decode is framed value v as JSON, or why it cannot be read (an
	// unknown schema, a value that does not match it, a schema not
	// resolved).
	Decode(v []byte) ([]byte, error)
}

// ReadsValues reports whether the decider reads registry values (its
// Config.Values), so that a caller with nothing to resolve skips Resolve.
func (d *Decider) ReadsValues() bool { return d.values != nil }

// Resolve fetches the schemas that the framed values of krs name and the
// decider has not cached yet, so that Decide (pure) can read them. Its
// error is transient (the registry could not answer): call it again; a
// schema ID the registry does not have is no error here, Decide
// dead-letters its records (undecodable). Without a reader it does
// nothing.
func (d *Decider) Resolve(ctx context.Context, krs []*kgo.Record) error {
	if d.values == nil {
		return nil
	}
	vs := make([][]byte, 0, len(krs))
	for _, kr := range krs {
		if d.values.Framed(kr.Value) {
			vs = append(vs, kr.Value)
		}
	}
	if len(vs) == 0 {
		return nil
	}
	if err := d.values.Resolve(ctx, vs); err != nil {
		return fmt.Errorf("resolving schemas: %w", err)
	}
	return nil
}

// readValue is r with its logical value (Record.Decoded) when a reader is
// configured and r's value is in its wire format. A value that does not
// decode, or names a schema the registry does not have, is undecodable,
// with the schema ID in the reason; so is one whose schema was not
// resolved (a caller that skipped Resolve).
func (d *Decider) readValue(r eventid.Record) (eventid.Record, error) {
	if d.values == nil || !d.values.Framed(r.Value) {
		return r, nil
	}
	v, err := d.values.Decode(r.Value)
	if err != nil {
		return r, &eventid.Error{Reason: eventid.ReasonUndecodable, Err: fmt.Errorf("schema registry value: %w", err)}
	}
	r.Decoded = v
	return r, nil
}
