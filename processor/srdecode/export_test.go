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

// CacheState is the cache's books: schemas that exist and "no such
// schema" answers it holds, the count of the latter it keeps, and the
// IDs pinned.
func (r *Registry) CacheState() (schemas, unknowns, unknownCount, pinned int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, s := range r.byID {
		if s.unknown {
			unknowns++
		} else {
			schemas++
		}
	}
	return schemas, unknowns, r.unknown, len(r.pinned)
}
