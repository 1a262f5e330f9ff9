package ledger

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// The read of started rows encodes its arrays itself (arrays.go); pgx
// encodes the same columns, for every other statement, from the array
// types of params.go. Each must be the other's bytes, empty strings,
// empty arrays and extreme integers included.
func TestOwnArraysAreTheBytesPgxSends(t *testing.T) {
	m := pgtype.NewMap()
	pgx := func(oid uint32, v any) []byte {
		t.Helper()
		b, err := m.Encode(oid, pgtype.BinaryFormatCode, v, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	texts := [][]string{{}, {""}, {"activity-a:evt-1", "", "ünïcødé", string(make([]byte, 300))}}
	for _, v := range texts {
		b := arrayHeader(nil, len(v), oidText)
		for _, s := range v {
			b = appendTextElem(b, s)
		}
		if want := pgx(oidTextArray, textArray(v)); !bytes.Equal(b, want) {
			t.Errorf("text[] %q:\n ours %x\n pgx's %x", v, b, want)
		}
	}
	hash := [32]byte{1, 2, 3}
	for _, v := range [][][]byte{{}, {hash[:]}, {hash[:], {}, {0xff}}} {
		b := arrayHeader(nil, len(v), oidBytea)
		for _, e := range v {
			b = appendBytesElem(b, e)
		}
		if want := pgx(oidByteaArray, byteaArray(v)); !bytes.Equal(b, want) {
			t.Errorf("bytea[] %x:\n ours %x\n pgx's %x", v, b, want)
		}
	}
	for _, v := range [][][16]byte{{}, {{1}, {0xff, 15: 0xee}}} {
		b := arrayHeader(nil, len(v), oidUUID)
		for _, k := range v {
			b = appendBytesElem(b, k[:])
		}
		if want := pgx(oidUUIDArray, uuidArray(v)); !bytes.Equal(b, want) {
			t.Errorf("uuid[] %x:\n ours %x\n pgx's %x", v, b, want)
		}
	}
	for _, v := range [][]int32{{}, {0, 1, -1, 1<<31 - 1, -1 << 31}} {
		b := arrayHeader(nil, len(v), oidInt4)
		for _, x := range v {
			b = appendInt4Elem(b, x)
		}
		if want := pgx(oidInt4Array, int4Array(v)); !bytes.Equal(b, want) {
			t.Errorf("int4[] %v:\n ours %x\n pgx's %x", v, b, want)
		}
	}
	for _, v := range [][]int64{{}, {0, 1, -1, 1<<63 - 1, -1 << 63}} {
		b := arrayHeader(nil, len(v), oidInt8)
		for _, x := range v {
			b = appendInt8Elem(b, x)
		}
		if want := pgx(oidInt8Array, int8Array(v)); !bytes.Equal(b, want) {
			t.Errorf("int8[] %v:\n ours %x\n pgx's %x", v, b, want)
		}
	}
}
