package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The read of started rows (startedread.go) sends its batch's columns as
// arrays it encodes itself, in PostgreSQL's binary array format
// (array_send), straight from the intents into one buffer sized for them
// and kept for the next statement, and runs on the connection's PgConn:
// pgx's own path encodes each element through an interface into a buffer
// it grows from 256 bytes on every statement (BenchmarkClaimStartedRows:
// a replay's claim of 1,000 IDs allocated 1.0 MB, 0.56 MB so). The bytes
// sent are pgx's, element for element (TestOwnArraysAreTheBytesPgxSends).

// Element type OIDs (pg_type.oid) and their arrays'.
const (
	oidBytea, oidInt8, oidInt4, oidText, oidUUID = 17, 20, 23, 25, 2950
	oidByteaArray, oidInt4Array, oidTextArray    = 1001, 1007, 1009
	oidInt8Array, oidUUIDArray                   = 1016, 2951
)

// arrayHeader appends a one-dimensional array's header: no NULL element
// (arrayElem sets the flag when it writes one), n elements from index 1.
func arrayHeader(b []byte, n int, elem uint32) []byte {
	b = binary.BigEndian.AppendUint32(b, 1) // dimensions
	b = binary.BigEndian.AppendUint32(b, 0) // has NULLs
	b = binary.BigEndian.AppendUint32(b, elem)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	return binary.BigEndian.AppendUint32(b, 1) // lower bound
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

// encodeBuffers keeps the buffers statements' parameters were encoded in;
// one that grew past maxEncodeBuffer is let go.
var encodeBuffers sync.Pool

const maxEncodeBuffer = 4 << 20

// encodeBuffer is an empty buffer of at least size bytes; give it back
// to encodeBuffers once the statement is answered.
func encodeBuffer(size int) *[]byte {
	if bp, ok := encodeBuffers.Get().(*[]byte); ok && cap(*bp) >= size && cap(*bp) <= maxEncodeBuffer {
		*bp = (*bp)[:0]
		return bp
	}
	b := make([]byte, 0, size)
	return &b
}

// binaryFormats is every parameter's and column's format: binary.
var binaryFormats = []int16{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}

// queryEncoded runs sql, named name when the pool's connections keep
// prepared statements (pgx's default, QueryExecModeCacheStatement), with
// params already encoded in binary (their types oids), and calls row with
// each answer row's columns in binary (valid until row returns). Behind a
// transaction pooler (postgres.pooler: transaction; every other exec mode)
// it sends the statement unnamed every time, as pgx's describe mode does.
// A query tracer of the pool's (NewFromPool) sees it as a query, with
// the arguments args gives (pgx's own Query would pass them; built only
// for a tracer).
func (p *Postgres) queryEncoded(ctx context.Context, name, sql string, oids []uint32, params [][]byte, args func() []any, row func(cols [][]byte) error) (err error) {
	c, err := p.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	conn := c.Conn()
	var tag pgconn.CommandTag
	if t := conn.Config().Tracer; t != nil {
		ctx = t.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: sql, Args: args()})
		defer func() { t.TraceQueryEnd(ctx, conn, pgx.TraceQueryEndData{CommandTag: tag, Err: err}) }()
	}
	formats := binaryFormats[:len(params)]
	var rr *pgconn.ResultReader
	prepared := conn.Config().DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
	if prepared {
		sd, err := conn.Prepare(ctx, name, sql)
		if err != nil {
			return err
		}
		if !slices.Equal(sd.ParamOIDs, oids) {
			return fmt.Errorf("statement %s takes parameters of types %v, not %v", name, sd.ParamOIDs, oids)
		}
		rr = conn.PgConn().ExecStatement(ctx, sd, params, formats, binaryFormats[:1])
	} else {
		rr = conn.PgConn().ExecParams(ctx, sql, params, oids, formats, binaryFormats[:1])
	}
	var rowErr error
	for rr.NextRow() {
		if rowErr = row(rr.Values()); rowErr != nil {
			break
		}
	}
	tag, err = rr.Close()
	if prepared && stalePrepared(err) {
		// The server no longer has the statement as prepared (DISCARD
		// ALL, a change of the table's columns): prepared again next
		// time. The server has just answered; one that does not answer
		// the deallocation within deallocateWithin loses the connection
		// (pgconn closes it, and the pool replaces it).
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deallocateWithin)
		err = errors.Join(err, conn.Deallocate(dctx, name))
		cancel()
	}
	if rowErr != nil {
		return rowErr
	}
	return err
}

// deallocateWithin bounds the deallocation of a stale prepared statement.
const deallocateWithin = 5 * time.Second

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
