package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The read of started rows (startedread.go), the claim (claim.go) and the
// mark (marks.go) send their batch's columns as arrays they encode
// themselves, in PostgreSQL's binary array format (array_send), straight
// from the intents into one buffer sized for them and kept for the next
// statement, and run on the connection's PgConn: pgx's own path encodes
// each element through an interface into a buffer it grows from 256 bytes
// on every statement (BenchmarkClaimStartedRows: a replay's claim of 1,000
// IDs allocated 1.0 MB, 0.54 MB so, 0.35 MB with room made for its Bind
// first (reserve), 0.12 MB with the claim's working memory kept for the
// next claim (scratch.go); BenchmarkClaimByExecMode: a claim of 100 new
// events 145 KB, 21 KB so; BenchmarkMarkStarted: a mark of 100 rows 83 KB,
// 24 KB). The bytes sent are pgx's, element for element
// (TestOwnArraysAreTheBytesPgxSends,
// TestTheClaimsAndMarksOwnParametersAreTheBytesPgxSendsForTheirTracedArguments).

// Element type OIDs (pg_type.oid) and their arrays'.
const (
	oidBytea, oidInt8, oidInt4, oidText, oidUUID = 17, 20, 23, 25, 2950
	oidByteaArray, oidInt4Array, oidTextArray    = 1001, 1007, 1009
	oidInt8Array, oidUUIDArray                   = 1016, 2951
)

// arrayHeader appends a one-dimensional array's header: n elements from
// index 1, none of them NULL (the elements' appenders write none).
func arrayHeader(b []byte, n int, elem uint32) []byte {
	b = binary.BigEndian.AppendUint32(b, 1) // dimensions
	b = binary.BigEndian.AppendUint32(b, 0) // has NULLs
	b = binary.BigEndian.AppendUint32(b, elem)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	return binary.BigEndian.AppendUint32(b, 1) // lower bound
}

// appendArray appends to b a one-dimensional array of n elements of type
// oid, element i appended by elem(b, i), and points *param at the array.
func appendArray(b []byte, param *[]byte, n int, oid uint32, elem func(b []byte, i int) []byte) []byte {
	at := len(b)
	b = arrayHeader(b, n, oid)
	for i := range n {
		b = elem(b, i)
	}
	*param = b[at:len(b):len(b)]
	return b
}

func appendTextElem(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendBytesElem(b []byte, v []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

func appendInt4Elem(b []byte, x int32) []byte {
	b = binary.BigEndian.AppendUint32(b, 4)
	return binary.BigEndian.AppendUint32(b, uint32(x))
}

func appendInt8Elem(b []byte, x int64) []byte {
	b = binary.BigEndian.AppendUint32(b, 8)
	return binary.BigEndian.AppendUint64(b, uint64(x))
}

// maxEncodeBuffer bounds the buffers a Postgres keeps for its
// statements' parameters (Postgres.encodeBuffers); a larger one is let go.
const maxEncodeBuffer = 4 << 20

// encodeBuffer is an empty buffer of at least size bytes, from the ones p
// keeps; give it back with keepEncodeBuffer once the statement is answered.
func (p *Postgres) encodeBuffer(size int) *[]byte {
	if bp, ok := p.encodeBuffers.Get().(*[]byte); ok && cap(*bp) >= size {
		*bp = (*bp)[:0]
		return bp
	}
	b := make([]byte, 0, size)
	return &b
}

// keepEncodeBuffer keeps bp for the next statement, unless it is larger
// than maxEncodeBuffer.
func (p *Postgres) keepEncodeBuffer(bp *[]byte) {
	if cap(*bp) <= maxEncodeBuffer {
		p.encodeBuffers.Put(bp)
	}
}

// binaryFormats is every parameter's and column's format: binary.
var binaryFormats = []int16{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}

// queryEncoded runs sql after settings (jitOffSQL, or genericPlanSQL: a
// statement of set_config calls local to the transaction, nojit.go), named name when the pool's connections keep
// prepared statements (pgx's default, QueryExecModeCacheStatement), with
// params already encoded in binary (their types oids), and calls row with
// each answer row's columns in binary (valid until row returns). Behind a
// transaction pooler (postgres.pooler: transaction; every other exec mode)
// it sends the statement unnamed every time, as pgx's describe mode does.
// A query tracer of the pool's (NewFromPool) sees it as pgx's own Query
// would show it: a query with the arguments args gives (built only for a
// tracer), and a prepare when pgx's would prepare or describe it (prepare,
// describe).
func (p *Postgres) queryEncoded(ctx context.Context, settings, name, sql string, oids []uint32, params [][]byte, args func() []any, row func(cols [][]byte) error) (err error) {
	c, err := p.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	conn := c.Conn()
	cfg := conn.Config() // a copy: once a read
	var tag pgconn.CommandTag
	if t := cfg.Tracer; t != nil {
		ctx = t.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: sql, Args: args()})
		defer func() { t.TraceQueryEnd(ctx, conn, pgx.TraceQueryEndData{CommandTag: tag, Err: err}) }()
	}
	formats := binaryFormats[:len(params)]
	mode := cfg.DefaultQueryExecMode
	prepared := mode == pgx.QueryExecModeCacheStatement
	room := bindRoom(name, params) + reserve(len(settings)+64) // and the settings' Parse, Bind, Describe and Execute
	if !prepared {
		room += reserve(len(sql) + 4*len(oids)) // and its Parse
	}
	for again := false; ; again = true {
		var (
			ps     *preparedStatement
			rows   int
			rowErr error
		)
		if prepared {
			if ps, err = prepare(ctx, conn, cfg.Tracer, name, sql, oids); err != nil {
				return err
			}
		} else {
			if err = describe(ctx, conn, cfg.Tracer, mode, name, sql, oids); err != nil {
				return err
			}
		}
		// The statement runs after its settings (jitOffSQL, or
		// genericPlanSQL), in one pipeline and one implicit transaction
		// (nojit.go).
		pc := conn.PgConn()
		pc.Frontend().Send(room)
		pl := pc.StartPipeline(ctx)
		pl.SendQueryParams(settings, nil, nil, nil, nil)
		if prepared {
			pl.SendQueryStatement(ps.sd, params, formats, binaryFormats[:1])
		} else {
			pl.SendQueryParams(sql, params, oids, formats, binaryFormats[:1])
		}
		err = pl.Sync()
		if err == nil {
			err = closeResult(pl.GetResults()) // the settings'
		}
		if err == nil {
			var res any
			if res, err = pl.GetResults(); err == nil {
				rr, ok := res.(*pgconn.ResultReader)
				if !ok {
					err = fmt.Errorf("ledger: a pipeline answered %T, want a statement's rows", res)
				} else {
					for rr.NextRow() {
						rows++
						if rowErr = row(rr.Values()); rowErr != nil {
							break
						}
					}
					tag, err = rr.Close()
				}
			}
		}
		if cerr := pl.Close(); err == nil {
			err = cerr // the Sync's error, if any
		}
		if rowErr == errStopReading {
			rowErr = nil
		}
		if rowErr != nil {
			err = rowErr
		}
		if ps == nil {
			if _, ok := conn.PgConn().CustomData()[name].(describedStatement); ok && err != nil {
				// As pgx's Rows forget a statement's description when
				// its run failed: described again next time.
				delete(conn.PgConn().CustomData(), name)
			}
			return err
		}
		if rowErr != nil || !stalePrepared(err) {
			return err
		}
		// The server no longer has the statement as prepared (DISCARD
		// ALL, pgx's DeallocateAll, a migration that changed a column
		// it returns): deallocated and prepared again, under this
		// read's context, and run once more, as no row has been read.
		// Behind a transaction pooler postgres.pooler does not name,
		// the second run may meet another session too: its error, if
		// any, is returned (classify names the setting), and its rows
		// are the same statement's.
		ps.stale = true
		if again || rows > 0 {
			return err
		}
	}
}

// closeResult closes the result reader a pipeline's GetResults answered
// (res, err), and returns its error or err.
func closeResult(res any, err error) error {
	if err != nil {
		return err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return fmt.Errorf("ledger: a pipeline answered %T, want a statement's rows", res)
	}
	_, err = rr.Close()
	return err
}

// errStopReading, returned by a row function of queryEncoded, stops the
// reading of the answer: the statement answered, and neither its caller
// nor a tracer hears of an error, as when pgx's Rows are closed early.
var errStopReading = errors.New("ledger: answer read far enough")

// describedStatement marks, in a connection's CustomData under its name,
// a statement describe has described on it.
type describedStatement struct{}

// describe describes the statement name to the server, as pgx's own Query
// does it in the exec modes that run a statement unnamed after a
// description: once a session in QueryExecModeCacheDescribe (what
// postgres.pooler: transaction sets), before every run in
// QueryExecModeDescribeExec (a round trip of its own, as pgx's), each
// told to the pool's tracer as a prepare of the unnamed statement
// (TestAPoolsTracerHearsOfTheClaimsAndMarksDescribesAsPgxToldIt). In the
// modes that describe nothing (Exec, SimpleProtocol) it does nothing.
func describe(ctx context.Context, conn *pgx.Conn, tracer pgx.QueryTracer, mode pgx.QueryExecMode, name, sql string, oids []uint32) (err error) {
	data := conn.PgConn().CustomData()
	switch mode {
	case pgx.QueryExecModeCacheDescribe:
		if _, ok := data[name].(describedStatement); ok {
			return nil
		}
	case pgx.QueryExecModeDescribeExec:
	default:
		return nil
	}
	if pt, ok := tracer.(pgx.PrepareTracer); ok {
		ctx = pt.TracePrepareStart(ctx, conn, pgx.TracePrepareStartData{SQL: sql})
		defer func() { pt.TracePrepareEnd(ctx, conn, pgx.TracePrepareEndData{Err: err}) }()
	}
	sd, err := conn.PgConn().Prepare(ctx, "", sql, nil)
	if err != nil {
		return err
	}
	if !slices.Equal(sd.ParamOIDs, oids) {
		return fmt.Errorf("statement %s takes parameters of types %v, not %v", name, sd.ParamOIDs, oids)
	}
	if mode == pgx.QueryExecModeCacheDescribe {
		data[name] = describedStatement{}
	}
	return nil
}

// preparedStatement is a statement queryEncoded prepared on one
// connection, kept in the connection's CustomData under its name.
type preparedStatement struct {
	sd *pgconn.StatementDescription
	// stale: the server refused it, or its preparation failed; the next
	// read deallocates it (a statement the server does not have is no
	// error) and prepares it again.
	stale bool
}

// prepare is the statement name on conn, prepared now unless the
// connection has it already.
func prepare(ctx context.Context, conn *pgx.Conn, tracer pgx.QueryTracer, name, sql string, oids []uint32) (_ *preparedStatement, err error) {
	data := conn.PgConn().CustomData()
	ps, _ := data[name].(*preparedStatement)
	if ps != nil && !ps.stale {
		return ps, nil
	}
	if ps != nil {
		if err := conn.PgConn().Deallocate(ctx, name); err != nil {
			return nil, err
		}
		delete(data, name)
	}
	if pt, ok := tracer.(pgx.PrepareTracer); ok {
		ctx = pt.TracePrepareStart(ctx, conn, pgx.TracePrepareStartData{Name: name, SQL: sql})
		defer func() { pt.TracePrepareEnd(ctx, conn, pgx.TracePrepareEndData{Err: err}) }()
	}
	sd, err := conn.PgConn().Prepare(ctx, name, sql, nil)
	if err != nil {
		// The server may have parsed it before it failed: deallocated
		// first next time.
		data[name] = &preparedStatement{stale: true}
		return nil, err
	}
	ps = &preparedStatement{sd: sd}
	data[name] = ps
	if !slices.Equal(sd.ParamOIDs, oids) {
		ps.stale = true
		return nil, fmt.Errorf("statement %s takes parameters of types %v, not %v", name, sd.ParamOIDs, oids)
	}
	return ps, nil
}

// stalePrepared says whether err is the server's refusal of a statement
// it no longer has, or whose plan no longer fits the table.
func stalePrepared(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "26000" || pe.Code == "0A000")
}

// int8Col and intCol read a binary int8, and an int2, int4 or int8.
func int8Col(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("an int8 of %d bytes", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// int8ArrayCol reads a binary one-dimensional int8[] (array_send) of no
// NULL, each element from 1 to max: the ordinals a statement answers.
func int8ArrayCol(b []byte, max int) ([]int64, error) {
	if len(b) < 12 {
		return nil, fmt.Errorf("an int8[] of %d bytes", len(b))
	}
	dims, elem := binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[8:])
	if dims == 0 {
		return nil, nil // empty
	}
	if dims != 1 || elem != oidInt8 || len(b) < 20 {
		return nil, fmt.Errorf("an array of %d dimensions of type %d, want an int8[]", dims, elem)
	}
	n := int(binary.BigEndian.Uint32(b[12:]))
	b = b[20:]
	if n < 0 || len(b) != 12*n {
		return nil, fmt.Errorf("an int8[] of %d elements in %d bytes", n, len(b))
	}
	xs := make([]int64, n)
	for i := range xs {
		if binary.BigEndian.Uint32(b) != 8 {
			return nil, fmt.Errorf("an int8[] whose element %d is not 8 bytes", i+1)
		}
		x := int64(binary.BigEndian.Uint64(b[4:]))
		if x < 1 || x > int64(max) {
			return nil, fmt.Errorf("an ordinal %d, want 1 to %d", x, max)
		}
		xs[i], b = x, b[12:]
	}
	return xs, nil
}

// boolCol reads a binary bool (NULL: false).
func boolCol(b []byte) bool { return len(b) == 1 && b[0] != 0 }

func intCol(b []byte) (int, error) {
	switch len(b) {
	case 2:
		return int(int16(binary.BigEndian.Uint16(b))), nil
	case 4:
		return int(int32(binary.BigEndian.Uint32(b))), nil
	case 8:
		return int(int64(binary.BigEndian.Uint64(b))), nil
	}
	return 0, fmt.Errorf("an integer of %d bytes", len(b))
}

// reserve is a message of no bytes that leaves room for that many more in
// the write buffer of the pgproto3.Frontend it is sent to (pgx v5.13.0's
// Frontend.Send appends a message's Encode to that buffer). The Frontend
// lets go of a buffer over 1 KiB after every write and grows the next one
// from 1 KiB by append, so a Bind of a batch's arrays (114 KB for a
// replay's 1,000 IDs) cost 2.5 times its size in allocations and their
// copies; with room made first, its size once
// (TestTheRoomMadeForABindHoldsItAndSendsNothing). A Frontend's trace,
// which dedup never turns on, shows it as an Unknown message of 0 bytes.
type reserve int

func (n reserve) Encode(dst []byte) ([]byte, error) {
	if cap(dst)-len(dst) >= int(n) {
		return dst, nil
	}
	b := make([]byte, len(dst), len(dst)+int(n))
	copy(b, dst)
	return b, nil
}

func (reserve) Decode([]byte) error { return errors.New("ledger: reserve is never received") }

func (reserve) Frontend() {}

// bindRoom is the room a Bind of the statement name with params takes,
// with the messages sent after it (Describe, Execute, Sync): pgproto3's
// Bind.Encode, its formats and parameters.
func bindRoom(name string, params [][]byte) reserve {
	n := 1 + 4 + 1 + len(name) + 1 + 2 + 2*len(params) + 2 + 2 + 2 // the header, portal, statement, formats, result format
	for _, p := range params {
		n += 4 + len(p)
	}
	return reserve(n + 64)
}
