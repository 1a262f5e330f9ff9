package ledger

import (
	"github.com/jackc/pgx/v5/pgtype"
)

// The parameter arrays of the claim, the read of started rows and the
// mark: a batch's columns, sent as PostgreSQL arrays. pgx encodes a plain
// Go slice ([]string, [][16]byte, []int64) element by element through an
// interface, which copies each element to the heap (an allocation per
// element and column: most of what a claim allocates). These types hand
// pgx a pointer into the slice instead, which an interface holds as is;
// the bytes sent are the same (the codecs' Valuer paths). A nil slice is
// sent as NULL, an empty one as an empty array, like pgx's own.

// textArray is a text[] parameter.
type textArray []string

func (a textArray) Dimensions() []pgtype.ArrayDimension { return dimensions(a == nil, len(a)) }
func (a textArray) Index(i int) any                     { return (*textElem)(&a[i]) }
func (a textArray) IndexType() any                      { return new(textElem) }

type textElem string

func (e *textElem) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*e), Valid: true}, nil
}

// byteaArray is a bytea[] parameter.
type byteaArray [][]byte

func (a byteaArray) Dimensions() []pgtype.ArrayDimension { return dimensions(a == nil, len(a)) }
func (a byteaArray) Index(i int) any                     { return (*byteaElem)(&a[i]) }
func (a byteaArray) IndexType() any                      { return new(byteaElem) }

type byteaElem []byte

// BytesValue is the element's bytes; a nil element is sent as NULL, as
// pgx sends a nil []byte.
func (e *byteaElem) BytesValue() ([]byte, error) { return *e, nil }

// uuidArray is a uuid[] parameter: the ledger keys.
type uuidArray [][16]byte

func (a uuidArray) Dimensions() []pgtype.ArrayDimension { return dimensions(a == nil, len(a)) }
func (a uuidArray) Index(i int) any                     { return (*uuidElem)(&a[i]) }
func (a uuidArray) IndexType() any                      { return new(uuidElem) }

type uuidElem [16]byte

func (e *uuidElem) UUIDValue() (pgtype.UUID, error) { return pgtype.UUID{Bytes: *e, Valid: true}, nil }

// int4Array is an int4[] parameter: Kafka partitions, generations.
type int4Array []int32

func (a int4Array) Dimensions() []pgtype.ArrayDimension { return dimensions(a == nil, len(a)) }
func (a int4Array) Index(i int) any                     { return (*int4Elem)(&a[i]) }
func (a int4Array) IndexType() any                      { return new(int4Elem) }

type int4Elem int32

func (e *int4Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

// int8Array is an int8[] parameter: Kafka offsets, fence epochs.
type int8Array []int64

func (a int8Array) Dimensions() []pgtype.ArrayDimension { return dimensions(a == nil, len(a)) }
func (a int8Array) Index(i int) any                     { return (*int8Elem)(&a[i]) }
func (a int8Array) IndexType() any                      { return new(int8Elem) }

type int8Elem int64

func (e *int8Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

// dimensions is a one-dimensional array's of n elements; nil (NULL) for
// a nil slice.
func dimensions(isNil bool, n int) []pgtype.ArrayDimension {
	if isNil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}}
}

// stateColumn reads a ledger row's state (NULL: no row) without an
// allocation per row: pgx would allocate a State for each *State it scans.
type stateColumn struct {
	s     State
	valid bool
}

// ScanBytes takes the column's text; a state outside the three (which the
// table's CHECK forbids) is kept as read, as a *State kept it.
func (c *stateColumn) ScanBytes(b []byte) error {
	if b == nil {
		*c = stateColumn{}
		return nil
	}
	switch string(b) {
	case string(StatePending):
		c.s = StatePending
	case string(StateStarted):
		c.s = StateStarted
	case string(StateDeadLettered):
		c.s = StateDeadLettered
	default:
		c.s = State(b)
	}
	c.valid = true
	return nil
}
