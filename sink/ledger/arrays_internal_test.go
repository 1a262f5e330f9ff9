package ledger

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
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

// encodeBuffers lets go of a buffer that grew past maxEncodeBuffer
// (arrays.go): a replay's read of a batch whose arrays take more (long
// workflow IDs, a large batch) leaves no buffer of that size behind it,
// for the next read or for the GC to find. pgx's own builder, which the
// read no longer uses, drops a buffer past 64 KiB when it is done.
func TestAReadPastTheBufferBoundLeavesNoBufferThatLarge(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // the pool's Put and Get on one P: what Get finds is what Put kept
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	if err := Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.URL = url
	cfg.StartedCache = 0 // every claim of the batch reads it
	p, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// 48 IDs of 100 KB: 4.8 MB of arrays, past maxEncodeBuffer (4 MiB).
	var in []decide.Intent
	var started []processor.Started
	for i := range 48 {
		id := fmt.Sprintf("activity-a:%d-%s", i, strings.Repeat("x", 100_000))
		in = append(in, decide.Intent{WorkflowID: id, ActivityID: "a", EventID: fmt.Sprint(i), IDRule: "field",
			PayloadHash: sha256.Sum256([]byte("p")), Topic: "events", Partition: 1, Offset: int64(i)})
		started = append(started, processor.Started{WorkflowID: id, RunID: "r", Generation: 1})
	}
	claimAll := func(want decide.Verdict) {
		t.Helper()
		v, err := p.Claim(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		for i := range v {
			if v[i].Verdict != want {
				t.Fatalf("intent %d: %s, want %s", i, v[i].Verdict, want)
			}
		}
	}
	claimAll(decide.VerdictNew)
	if err := p.MarkStarted(ctx, started); err != nil {
		t.Fatal(err)
	}
	claimAll(decide.VerdictDuplicate)  // the claim statement's answer: a replay from here
	for p.encodeBuffers.Get() != nil { // nothing kept from before
	}
	claimAll(decide.VerdictDuplicate) // the replay's read, of 4.8 MB of arrays
	for {
		bp, ok := p.encodeBuffers.Get().(*[]byte)
		if !ok {
			return
		}
		if cap(*bp) > maxEncodeBuffer {
			t.Fatalf("after a read of %d IDs the pool keeps a buffer of %d bytes, past its bound of %d", len(in), cap(*bp), maxEncodeBuffer)
		}
	}
}
