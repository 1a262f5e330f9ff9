package srdecode

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/sr"
)

// Source is what the Registry asks of a schema registry: *sr.Client,
// or a test's stand-in reached through one.
type Source interface {
	SchemaByID(ctx context.Context, id int) (sr.Schema, error)
	SchemaByVersion(ctx context.Context, subject string, version int) (sr.SubjectSchema, error)
}

// ErrUnresolved is Decode's error for a schema ID the cache does not
// hold: the caller skipped Resolve, or a Resolve since forgot it (a full
// cache): transient, resolve again.
var ErrUnresolved = errors.New("schema ID not resolved")

// maxReferences bounds the schemas one schema pulls in through its
// references (transitively).
const maxReferences = 256

// maxUnknownIDs bounds the "no such schema" answers the cache keeps.
const maxUnknownIDs = 1024

// maxSchemas bounds the schemas that exist (decoders, or why none could
// be built) the cache keeps.
const maxSchemas = 4096

// Registry decodes framed values with the schemas of one registry,
// cached by ID. It is safe for concurrent use.
type Registry struct {
	src Source
	// keepSchemas and keepUnknown bound the cache (New: maxSchemas and
	// maxUnknownIDs; NewBounded: its n, each).
	keepSchemas, keepUnknown int

	mu      sync.RWMutex
	byID    map[int]*schema
	unknown int         // entries of byID that are the registry's "no such schema"
	pinned  map[int]int // IDs of the batches being resolved: never forgotten
}

// schema is one resolved ID: a decoder, or why none can be built.
type schema struct {
	id     int
	typ    sr.SchemaType
	decode func(payload []byte) ([]byte, error)
	err    error // permanent: the registry has no such ID, or it does not compile
	// unknown: the registry said it has no such ID. A producer can name
	// any ID, so these answers are kept up to maxUnknownIDs; schemas that
	// exist up to maxSchemas (a serializer that registers its schemas
	// grows the registry at will).
	unknown bool
}

// New returns a Registry asking src. Its cache keeps up to 4096 schemas
// that exist and 1024 "no such schema" answers.
func New(src Source) *Registry {
	return &Registry{src: src, keepSchemas: maxSchemas, keepUnknown: maxUnknownIDs, byID: map[int]*schema{}, pinned: map[int]int{}}
}

// NewBounded is New with a cache of n schemas that exist and n "no such
// schema" answers (n below 1 is 1): for a process that reads few schemas
// and wants the memory back, or a test that wants the cache to forget.
// The IDs of the batches being resolved are never forgotten, so
// concurrent Resolves can leave it holding more, by at most the IDs they
// pinned at once, until the next entry of that kind is stored.
func NewBounded(src Source, n int) *Registry {
	n = max(n, 1)
	return &Registry{src: src, keepSchemas: n, keepUnknown: n, byID: map[int]*schema{}, pinned: map[int]int{}}
}

// Resolve fetches and compiles the schemas the framed values among vs
// name that the cache does not hold yet. It returns an error only when
// the registry could not answer (transient: call again); an ID the
// registry says does not exist is cached as such, and Decode reports it.
//
// When it returns nil, every ID its values name is in the cache. While it
// fetches, no Resolve forgets one of them (its batch is pinned); one that
// runs after it may, on a full cache, and Decode then returns
// ErrUnresolved for that ID. A caller that resolves from several
// goroutines and decodes what it resolved holds each Resolve and its
// Decodes apart from the others' (the router does).
func (r *Registry) Resolve(ctx context.Context, vs [][]byte) error {
	seen := map[int]bool{}
	missing := false
	r.mu.RLock()
	for _, v := range vs {
		if !Framed(v) {
			continue
		}
		id, _, err := SchemaID(v)
		if err != nil || seen[id] {
			continue
		}
		seen[id] = true
		missing = missing || r.byID[id] == nil
	}
	r.mu.RUnlock()
	if !missing {
		return nil
	}
	// Pin the batch, then look again: another Resolve may have forgotten
	// some of it, or fetched some, since.
	var want []int
	r.mu.Lock()
	for id := range seen {
		r.pinned[id]++
		if r.byID[id] == nil {
			want = append(want, id)
		}
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		for id := range seen {
			if r.pinned[id]--; r.pinned[id] == 0 {
				delete(r.pinned, id)
			}
		}
		r.mu.Unlock()
	}()
	sort.Ints(want)
	for _, id := range want {
		s, err := r.fetch(ctx, id)
		if err != nil {
			return err
		}
		r.mu.Lock()
		if r.byID[id] == nil { // else another Resolve of id stored it meanwhile
			r.forget(s.unknown)
			if s.unknown {
				r.unknown++
			}
			r.byID[id] = s
		}
		r.mu.Unlock()
	}
	return nil
}

// forget makes room for one more entry of its kind: "no such schema"
// answers (unknown) up to r.keepUnknown, schemas that exist up to
// r.keepSchemas. It drops entries of that kind, none pinned (the batches
// being resolved); a forgotten ID is asked again when a value names it.
// r.mu is held.
func (r *Registry) forget(unknown bool) {
	full := func() bool {
		if unknown {
			return r.unknown >= r.keepUnknown
		}
		return len(r.byID)-r.unknown >= r.keepSchemas
	}
	for id, s := range r.byID {
		if !full() {
			return
		}
		if s.unknown == unknown && r.pinned[id] == 0 {
			delete(r.byID, id)
			if unknown {
				r.unknown--
			}
		}
	}
}

// Resolved reports whether Decode knows schema id (decoder or permanent error).
func (r *Registry) Resolved(id int) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byID[id] != nil
}

// Decode returns the logical value of a framed value as JSON. Every error
// but ErrUnresolved is permanent (the same bytes never decode) and names
// the schema ID.
func (r *Registry) Decode(v []byte) ([]byte, error) {
	id, payload, err := SchemaID(v)
	if err != nil {
		return nil, err
	}
	r.mu.RLock()
	s := r.byID[id]
	r.mu.RUnlock()
	if s == nil {
		return nil, fmt.Errorf("schema %d: %w", id, ErrUnresolved)
	}
	if s.err != nil {
		return nil, fmt.Errorf("schema %d: %w", id, s.err)
	}
	out, err := s.decode(payload)
	if err != nil {
		return nil, fmt.Errorf("decoding with %s schema %d: %w", typeName(s.typ), id, err)
	}
	return out, nil
}

// fetch asks the registry for schema id and its references and compiles
// it. A transient failure is returned; a permanent one is the schema's err.
func (r *Registry) fetch(ctx context.Context, id int) (*schema, error) {
	top, err := r.src.SchemaByID(ctx, id)
	if err != nil {
		if notFound(err) {
			return &schema{id: id, err: fmt.Errorf("the registry has no such schema: %w", err), unknown: true}, nil
		}
		return nil, fmt.Errorf("fetching schema %d: %w", id, err)
	}
	refs := map[string]schemaText{} // by reference name (an import path, an Avro full name)
	var order []string              // dependencies first
	var walk func(sch sr.Schema, depth int) error
	walk = func(sch sr.Schema, depth int) error {
		for _, ref := range sch.References {
			if _, ok := refs[ref.Name]; ok {
				continue
			}
			if len(refs) >= maxReferences || depth > 32 {
				return permanentError{fmt.Errorf("more than %d references, or nested deeper than 32", maxReferences)}
			}
			ss, err := r.src.SchemaByVersion(ctx, ref.Subject, ref.Version)
			if err != nil {
				if notFound(err) {
					return permanentError{fmt.Errorf("reference %q (subject %q version %d): %w", ref.Name, ref.Subject, ref.Version, err)}
				}
				return fmt.Errorf("fetching reference %q of schema %d: %w", ref.Name, id, err)
			}
			refs[ref.Name] = ss.Schema
			if err := walk(ss.Schema, depth+1); err != nil {
				return err
			}
			order = append(order, ref.Name)
		}
		return nil
	}
	if err := walk(top, 0); err != nil {
		var p permanentError
		if errors.As(err, &p) {
			return &schema{id: id, typ: top.Type, err: p.err}, nil
		}
		return nil, err
	}
	s := &schema{id: id, typ: top.Type}
	switch top.Type {
	case sr.TypeAvro:
		s.decode, s.err = compileAvro(top.Schema, refs, order)
	case sr.TypeProtobuf:
		s.decode, s.err = compileProtobuf(ctx, top.Schema, refs)
	case sr.TypeJSON:
		s.decode = decodeJSON
	default:
		s.err = fmt.Errorf("schema type %q is not avro, protobuf or json", top.Type)
	}
	if s.err != nil {
		if ctx.Err() != nil {
			// The compile may have failed for the context alone
			// (protocompile's): transient, never the schema's verdict.
			return nil, fmt.Errorf("compiling schema %d: %w", id, context.Cause(ctx))
		}
		s.err = fmt.Errorf("compiling %s schema: %w", typeName(top.Type), s.err)
	}
	return s, nil
}

type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }

// notFound reports whether the registry answered that what was asked
// does not exist: HTTP 404 with the registry's own error code (40401
// subject, 40402 version, 40403 schema). A 404 without one is not the
// registry speaking (a wrong base path, a proxy): like any other answer
// (5xx, 401, 403, 429) it may heal, so it is transient.
func notFound(err error) bool {
	var re *sr.ResponseError
	if !errors.As(err, &re) || re.StatusCode != 404 {
		return false
	}
	switch re.ErrorCode {
	case 40401, 40402, 40403:
		return true
	}
	return false
}

func typeName(t sr.SchemaType) string {
	switch t {
	case sr.TypeAvro:
		return "avro"
	case sr.TypeProtobuf:
		return "protobuf"
	case sr.TypeJSON:
		return "json"
	}
	return t.String()
}

// schemaText is a referenced schema as the registry holds it.
type schemaText = sr.Schema
