package ledger

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

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

// startedParamsOf is the read of started rows' parameters for n IDs of one
// record each, as encodeStartedParams writes them.
func startedParamsOf(n int) [][]byte {
	in := make([]decide.Intent, n)
	keys := make([][16]byte, n)
	uniq := make([]int, n)
	byRecord := make([]bool, n)
	for i := range in {
		in[i] = decide.Intent{WorkflowID: fmt.Sprintf("activity-a:evt-%09d", i), PayloadHash: sha256.Sum256([]byte{byte(i)}),
			Topic: "events", Partition: int32(i % 8), Offset: int64(i)}
		keys[i], uniq[i], byRecord[i] = keyOf(in[i].WorkflowID), i, true
	}
	var params [11][]byte
	encodeStartedParams(nil, in, keys, uniq, byRecord, make([]int64, n), &params)
	return params[:6]
}

// The room queryEncoded makes in the Frontend's write buffer (bindRoom)
// holds the statement's Bind and the messages after it: the Frontend
// writes into it without growing it, and the room itself puts no byte on
// the wire.
func TestTheRoomMadeForABindHoldsItAndSendsNothing(t *testing.T) {
	for _, n := range []int{0, 1, 1000, 10_000} {
		params := startedParamsOf(n)
		var wire bytes.Buffer
		f := pgproto3.NewFrontend(bytes.NewReader(nil), &wire)
		send := func(room bool) {
			if room {
				f.Send(bindRoom("dedup_started_rows", params))
			}
			f.SendBind(&pgproto3.Bind{PreparedStatement: "dedup_started_rows", ParameterFormatCodes: binaryFormats[:len(params)],
				Parameters: params, ResultFormatCodes: binaryFormats[:1]})
			f.SendDescribe(&pgproto3.Describe{ObjectType: 'P'})
			f.SendExecute(&pgproto3.Execute{})
			f.SendSync(&pgproto3.Sync{})
			if err := f.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		send(false)
		want := bytes.Clone(wire.Bytes())
		wire.Reset()
		send(true)
		if !bytes.Equal(wire.Bytes(), want) {
			t.Fatalf("%d IDs: with the room, %d bytes sent; without it, %d", n, wire.Len(), len(want))
		}
		// What a statement allocates: the room, and the buffer of 1 KiB
		// the Frontend makes after a write of more; a Bind past the room
		// would grow the buffer again (without the room: 2.5 times the
		// statement's bytes; 2.8 for 10,000 IDs).
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 10 {
			wire.Reset()
			send(true)
		}
		runtime.ReadMemStats(&after)
		per := int(after.TotalAlloc-before.TotalAlloc) / 10
		// (The room of a large statement is allocated in whole pages of
		// 8 KiB.)
		if limit := int(bindRoom("dedup_started_rows", params)) + 8<<10 + 1024 + 512; per > limit {
			t.Errorf("%d IDs (%d bytes on the wire): %d bytes allocated a statement, more than the room and the next buffer (%d)", n, len(want), per, limit)
		}
	}
}

// A room made for a statement that then never runs (its context ended
// before the Bind) leaves the connection as it was: the next statement on
// it is answered.
func TestARoomForAStatementThatNeverRanLeavesTheConnectionClean(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	sd, err := c.Conn().PgConn().Prepare(ctx, "sum_of", "SELECT sum(x) FROM unnest($1::int8[]) x", []uint32{oidInt8Array})
	if err != nil {
		t.Fatal(err)
	}
	xs := arrayHeader(nil, 3, oidInt8)
	for _, x := range []int64{1, 2, 39} {
		xs = appendInt8Elem(xs, x)
	}
	params := [][]byte{xs}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	c.Conn().PgConn().Frontend().Send(bindRoom(sd.Name, params))
	if _, err := c.Conn().PgConn().ExecStatement(ended, sd, params, binaryFormats[:1], nil).Close(); err == nil {
		t.Fatal("a statement under an ended context ran")
	}
	c.Conn().PgConn().Frontend().Send(bindRoom(sd.Name, params))
	res := c.Conn().PgConn().ExecStatement(ctx, sd, params, binaryFormats[:1], nil).Read()
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if len(res.Rows) != 1 || string(res.Rows[0][0]) != "42" {
		t.Fatalf("the next statement on the connection answered %q, want 42", res.Rows)
	}
	var one int
	if err := c.Conn().QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("a query after it: %d, %v", one, err)
	}
}

// The claim and the mark encode their parameters themselves too
// (encodeClaimParams, encodeMarkParams, fenceArgs.encode), and a pool's
// query tracer is shown the arguments pgx's own Query would have been
// given (claimArgs, markArgs): each parameter must be pgx's bytes for that
// argument, empty strings, several fences and extreme integers included.
func TestTheClaimsAndMarksOwnParametersAreTheBytesPgxSendsForTheirTracedArguments(t *testing.T) {
	m := pgtype.NewMap()
	same := func(what string, params [][]byte, oids []uint32, args []any) {
		t.Helper()
		if len(params) != len(oids) || len(args) != len(oids) {
			t.Fatalf("%s: %d parameters, %d types, %d arguments", what, len(params), len(oids), len(args))
		}
		for k, a := range args {
			want, err := m.Encode(oids[k], pgtype.BinaryFormatCode, a, nil)
			if err != nil {
				t.Fatalf("%s: $%d: %v", what, k+1, err)
			}
			if !bytes.Equal(params[k], want) {
				t.Errorf("%s: $%d:\n ours %x\n pgx's %x", what, k+1, params[k], want)
			}
		}
	}
	in := []decide.Intent{
		{WorkflowID: "activity-a:evt-1", ActivityID: "a", EventID: "evt-1", IDRule: "header", PayloadHash: sha256.Sum256([]byte("1")),
			Topic: "events", Partition: 3, Offset: 1<<63 - 1, Fence: decide.Fence{Group: "g", Epoch: 7},
			Known: decide.Known{Digest: [16]byte{1, 2, 3, 15: 0xff}, Intents: 3}},
		{WorkflowID: "", ActivityID: "", EventID: "", IDRule: "", Topic: "", Partition: -1 << 31, Offset: -1 << 63,
			Known: decide.Known{Intents: -1 << 31}},
		{WorkflowID: "activity-ü:" + strings.Repeat("x", 300), ActivityID: "ü", EventID: "e", IDRule: "derived",
			Topic: "other", Partition: 1<<31 - 1, Offset: 0, Fence: decide.Fence{Group: "g2", Epoch: 1<<63 - 1}},
	}
	keys := make([][16]byte, len(in))
	for i := range in {
		keys[i] = keyOf(in[i].WorkflowID)
	}
	f := fencesOf(len(in), func(i int) processor.PartitionEpoch {
		return processor.PartitionEpoch{Group: in[i].Fence.Group, Topic: in[i].Topic, Partition: in[i].Partition, Epoch: in[i].Fence.Epoch}
	})
	for _, uniq := range [][]int{{0, 1, 2}, {2, 0}, {1}} {
		var params [15][]byte
		b := encodeClaimParams(nil, in, keys, uniq, (*[9][]byte)(params[:9]))
		b = f.encode(b, (*[4][]byte)(params[9:13]))
		encodeKnownParams(b, in, uniq, (*[2][]byte)(params[13:]))
		same(fmt.Sprintf("the claim of %v", uniq), params[:], claimParamOIDs, claimArgs(in, keys, uniq, f))
	}
	recs := []processor.KnownRecord{{Topic: "events", Partition: 3, Offset: 1<<63 - 1, Digest: [16]byte{1, 15: 0xff}},
		{Topic: "", Partition: -1 << 31, Offset: -1 << 63}, {Topic: "ü" + strings.Repeat("t", 300), Partition: 1<<31 - 1}}
	for _, n := range []int{0, 1, 3} {
		var params [7][]byte
		runs, runOf := knownRuns(recs[:n])
		encodeKnownRecords(nil, recs[:n], runOf, runs, &params)
		same(fmt.Sprintf("the known read of %d records", n), params[:], knownParamOIDs, knownArgs(recs[:n], runOf, runs))
	}
	for _, g := range []fenceArgs{fencesOf(0, nil), f} {
		var params [4][]byte
		g.encode(nil, &params)
		same(fmt.Sprintf("%d fences", len(g.epochs)), params[:], fenceParamOIDs, g.args())
	}
	ms := []mark{
		{s: processor.Started{WorkflowID: "activity-a:evt-1", RunID: "run", Generation: 1, Topic: "events", Partition: 3,
			Fence: decide.Fence{Group: "g", Epoch: 7}}, key: keys[0]},
		{s: processor.Started{Generation: -1 << 31, Partition: -1 << 31}},
		{s: processor.Started{WorkflowID: in[2].WorkflowID, RunID: strings.Repeat("r", 70), Generation: 1<<31 - 1, Topic: "other",
			Partition: 1<<31 - 1, Fence: decide.Fence{Group: "g2", Epoch: 1<<63 - 1}}, key: keys[2]},
	}
	for _, n := range []int{0, 1, 3} {
		var params [12][]byte
		b := encodeMarkParams(nil, ms[:n], (*[8][]byte)(params[:8]))
		f.encode(b, (*[4][]byte)(params[8:]))
		same(fmt.Sprintf("the mark of %d entries", n), params[:], markParamOIDs, markArgs(ms[:n], f))
	}
}

// The mark's answer names the entries recorded as an int8[] of ordinals
// (markStartedSQL), read by int8ArrayCol: what pgx sends of such an array
// reads back as itself, and an ordinal outside the entries, a NULL or an
// array of another type is an error, never an index into them.
func TestTheMarksOrdinalsReadBackAndOnlyWithinItsEntries(t *testing.T) {
	m := pgtype.NewMap()
	enc := func(oid uint32, v any) []byte {
		t.Helper()
		b, err := m.Encode(oid, pgtype.BinaryFormatCode, v, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, v := range [][]int64{{}, {1}, {3, 1, 2}} {
		got, err := int8ArrayCol(enc(oidInt8Array, v), 3)
		if err != nil || len(got) != len(v) || (len(v) > 0 && !slices.Equal(got, v)) {
			t.Errorf("%v read back as %v, %v", v, got, err)
		}
	}
	for what, b := range map[string][]byte{
		"an ordinal past the entries": enc(oidInt8Array, []int64{1, 4}),
		"an ordinal 0":                enc(oidInt8Array, []int64{0}),
		"a negative ordinal":          enc(oidInt8Array, []int64{-1 << 63}),
		"a NULL element":              enc(oidInt8Array, []*int64{nil}),
		"an int4[]":                   enc(oidInt4Array, []int32{1}),
		"a two-dimensional int8[]": enc(oidInt8Array, pgtype.Array[int64]{Elements: []int64{1, 2},
			Dims: []pgtype.ArrayDimension{{Length: 1, LowerBound: 1}, {Length: 2, LowerBound: 1}}, Valid: true}),
		"a NULL array":                  nil,
		"a truncated array":             enc(oidInt8Array, []int64{1, 2})[:30],
		"an array with a trailing byte": append(enc(oidInt8Array, []int64{1}), 0),
	} {
		if got, err := int8ArrayCol(b, 3); err == nil {
			t.Errorf("%s: read as %v, no error", what, got)
		}
	}
}
