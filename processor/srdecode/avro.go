package srdecode

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/hamba/avro/v2"
)

// compileAvro parses an Avro schema, its references' named types first
// (order: dependencies first), into a cache of its own: two schemas
// naming one type differently never share it.
func compileAvro(text string, refs map[string]schemaText, order []string) (func([]byte) ([]byte, error), error) {
	cache := &avro.SchemaCache{}
	for _, name := range order {
		if _, err := avro.ParseWithCache(refs[name].Schema, "", cache); err != nil {
			return nil, fmt.Errorf("reference %q: %w", name, err)
		}
	}
	sch, err := avro.ParseWithCache(text, "", cache)
	if err != nil {
		return nil, err
	}
	return func(payload []byte) ([]byte, error) { return decodeAvro(sch, payload) }, nil
}

// decodeAvro is the JSON of payload under sch (avrojson.go).
func decodeAvro(sch avro.Schema, payload []byte) ([]byte, error) {
	// hamba's Reader, not avro.Unmarshal: that takes a payload cut short
	// for a whole one (its io.EOF is success) and ignores trailing bytes.
	r := readers.Get().(*avro.Reader)
	defer readers.Put(r)
	r.Reset(payload)
	r.Error = nil // Reset keeps the last error
	items := len(payload)
	out := appendAvroJSON(make([]byte, 0, 2*len(payload)+16), sch, r, 0, &items)
	if errors.Is(r.Error, io.EOF) {
		return nil, errors.New("the payload ends before the record does")
	}
	if r.Error != nil {
		return nil, r.Error
	}
	if r.Peek(); r.Error == nil {
		return nil, errors.New("bytes after the record")
	}
	return out, nil
}

// readers are avro.Readers over a payload in memory (no io.Reader: the end
// of the payload is io.EOF).
var readers = sync.Pool{New: func() any { return avro.NewReader(nil, 0) }}
