package srdecode

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
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
	return func(payload []byte) ([]byte, error) {
		// Not avro.Unmarshal: it takes a payload cut short for a whole
		// one (its io.EOF is success), and ignores trailing bytes.
		r := readers.Get().(*avro.Reader)
		defer readers.Put(r)
		r.Reset(payload)
		r.Error = nil // Reset keeps the last error
		var v any
		r.ReadVal(sch, &v)
		if errors.Is(r.Error, io.EOF) {
			return nil, errors.New("the payload ends before the record does")
		}
		if r.Error != nil {
			return nil, r.Error
		}
		if r.Peek(); r.Error == nil {
			return nil, errors.New("bytes after the record")
		}
		return json.Marshal(jsonable(v))
	}, nil
}

// jsonable turns what hamba/avro decodes into a generic value that
// encoding/json writes as the logical value: decimals (big.Rat) as their
// exact decimal text when it has one, else "p/q".
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonable(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = jsonable(e)
		}
		return x
	case *big.Rat:
		if x.IsInt() {
			return json.Number(x.Num().String())
		}
		if f, exact := x.FloatPrec(); exact {
			return json.Number(x.FloatString(f))
		}
		return x.RatString()
	}
	return v
}

// readers are avro.Readers over a payload in memory (no io.Reader: the end
// of the payload is io.EOF).
var readers = sync.Pool{New: func() any { return avro.NewReader(nil, 0) }}
