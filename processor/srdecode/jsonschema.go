package srdecode

import (
	"bytes"
	"encoding/json"
	"errors"
)

// decodeJSON is a JSON Schema value: the JSON after the header, as it is.
// It is not validated against the schema (the producer's serializer
// validates; a value that is not valid JSON is undecodable).
func decodeJSON(payload []byte) ([]byte, error) {
	p := bytes.TrimSpace(payload)
	if !json.Valid(p) {
		return nil, errors.New("the payload after the header is not JSON")
	}
	return p, nil
}
