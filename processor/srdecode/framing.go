package srdecode

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/sr"
)

// Magic is the first byte of a value in the Confluent wire format.
const Magic = 0

// maxIndexes bounds a Protobuf value's message-index path (nesting depth).
const maxIndexes = 64

// Framed reports whether v is in the wire format: it starts with the magic byte
// (SchemaID then says whether a schema ID follows). A JSON value never
// starts with a zero byte.
func Framed(v []byte) bool { return len(v) > 0 && v[0] == Magic }

// SchemaID returns the schema ID of a framed value and what follows it.
func SchemaID(v []byte) (int, []byte, error) {
	var h sr.ConfluentHeader
	id, rest, err := h.DecodeID(v)
	if err != nil {
		return 0, nil, fmt.Errorf("reading the schema registry header: %w", err)
	}
	return id, rest, nil
}

// MessageIndexes reads a Protobuf value's message indexes (the path of
// the message in its .proto file: [0] the first top-level message, [1, 2]
// the third nested message of the second) and returns what follows them.
func MessageIndexes(b []byte) ([]int, []byte, error) {
	var h sr.ConfluentHeader
	idx, rest, err := h.DecodeIndex(b, maxIndexes)
	if err != nil {
		if errors.Is(err, sr.ErrNotRegistered) {
			return nil, nil, fmt.Errorf("reading the message indexes: more than %d", maxIndexes)
		}
		return nil, nil, fmt.Errorf("reading the message indexes: %w", err)
	}
	for _, i := range idx {
		if i < 0 {
			return nil, nil, fmt.Errorf("reading the message indexes: %d is negative", i)
		}
	}
	return idx, rest, nil
}
