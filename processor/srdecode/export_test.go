package srdecode

import "github.com/hamba/avro/v2"

// AvroJSON is decodeAvro for the tests.
func AvroJSON(schema string, payload []byte) ([]byte, error) {
	sch, err := avro.Parse(schema)
	if err != nil {
		return nil, err
	}
	return decodeAvro(sch, payload)
}

// MaxUnknownIDs is how many "no such schema" answers the cache keeps.
const MaxUnknownIDs = maxUnknownIDs

// CachedIDs is how many schema IDs the cache holds (schemas and answers).
func (r *Registry) CachedIDs() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.byID)
}

// MaxSchemas is how many schemas that exist the cache keeps.
const MaxSchemas = maxSchemas
