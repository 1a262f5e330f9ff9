package processor

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/decide"
)

// fetchPools lends the router's Kafka client the buffers a fetched batch
// is decompressed into and the Records decoded from it (kgo.WithPools),
// so that a replay's polls reuse them instead of leaving them to the
// collector. A record's memory goes back (letGo) when its last piece of
// work ended, never before: until then the record, its value and its
// headers are the router's as without pools. What may outlive the record
// owns its bytes: a start request's data (ownedRequest) and a dead
// letter's key, value and headers (outgoing.kafkaRecord). A batch some of
// whose records never reach an end (the router dropped them: their
// partition was revoked since the fetch; franz-go dropped them from its
// buffer at a pause) is left to the collector, as is an empty batch's
// buffer: nothing is lent twice.
type fetchPools struct {
	// bytes[k] holds buffers of at least class k's size in bytes, recs[k]
	// slices of at least class k's size in Records (sizeClass): a batch
	// gets one of the smallest class that holds it, at most a quarter
	// larger than it needs (franz-go zeroes a buffer's whole capacity when
	// it comes back: a small batch must not get a large one).
	bytes [bytesClasses]sync.Pool // *[]byte
	recs  [recordsClasses]sync.Pool
	// lent and back count the batches' Records lent and given back.
	lent, back atomic.Int64
}

const (
	minBytes       = 12 // classes from 4 KiB
	bytesClasses   = 45 // to 8 MiB: a larger batch is franz-go's own
	minRecords     = 4  // from 16 Records
	recordsClasses = 53 // to 128Ki Records
)

// sizeClass is the class of the smallest size that holds n, of the
// sizes 1<<min and those above it with three significant bits (five,
// six, seven and eight eighths of each power of two: 4, 5, 6, 7, 8, 10
// KiB...), and that size; ok is false over the largest of classes.
func sizeClass(n, min, classes int) (class, size int, ok bool) {
	if n <= 1<<min {
		return 0, 1 << min, true
	}
	shift := bits.Len(uint(n-1)) - 3
	m := (n-1)>>shift + 1 // 5 to 8
	class = (shift-min+2)*4 + m - 4
	return class, m << shift, class < classes
}

// heldClass is the class of the largest size of sizeClass's that
// capacity c holds (ok false: under the smallest, or over the largest).
func heldClass(c, min, classes int) (class int, ok bool) {
	if c < 1<<min {
		return 0, false
	}
	shift := bits.Len(uint(c)) - 3
	class = (shift-min+2)*4 + c>>shift - 4
	return class, class < classes
}

// GetDecompressBytes is a buffer of the class that holds the batch's
// decompressed size (decompressedSize), from the pool or made.
func (p *fetchPools) GetDecompressBytes(compressed []byte, codec kgo.CompressionCodecType) []byte {
	k, size, ok := sizeClass(decompressedSize(compressed, codec), minBytes, bytesClasses)
	if !ok {
		return nil // franz-go's codecs allocate what they need
	}
	if b, ok := p.bytes[k].Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, size)
}

// PutDecompressBytes takes back a batch's buffer, zeroed by franz-go:
// into the class its capacity holds (a codec may have grown it, or made
// its own).
func (p *fetchPools) PutDecompressBytes(b []byte) {
	if k, ok := heldClass(cap(b), minBytes, bytesClasses); ok {
		p.bytes[k].Put(&b)
	}
}

// GetRecords is a slice of at least n Records.
func (p *fetchPools) GetRecords(n int) []kgo.Record {
	p.lent.Add(1)
	k, size, ok := sizeClass(n, minRecords, recordsClasses)
	if !ok {
		return make([]kgo.Record, 0, n)
	}
	if s, ok := p.recs[k].Get().(*[]kgo.Record); ok {
		return (*s)[:0]
	}
	return make([]kgo.Record, 0, size)
}

// PutRecords takes back a batch's Records, zeroed.
func (p *fetchPools) PutRecords(s []kgo.Record) {
	p.back.Add(1)
	if k, ok := heldClass(cap(s), minRecords, recordsClasses); ok {
		p.recs[k].Put(&s)
	}
}

// xerialMagic begins a snappy batch in xerial's framing (Java clients').
var xerialMagic = []byte{130, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// decompressedSize is the size a batch's records decompress to, as its
// codec's header states it (snappy's length, zstd's frame content size,
// gzip's ISIZE, lz4's content size), else four times the compressed size.
// It only picks a buffer: a batch that needs more gets it from its codec.
func decompressedSize(compressed []byte, codec kgo.CompressionCodecType) int {
	guess := 4 * len(compressed)
	switch codec {
	case kgo.CodecSnappy:
		if !bytes.HasPrefix(compressed, xerialMagic) { // xerial's framing: blocks, each with its length
			if n, err := s2.DecodedLen(compressed); err == nil {
				return n
			}
		}
	case kgo.CodecZstd:
		var h zstd.Header
		if h.Decode(compressed) == nil && h.HasFCS && h.FrameContentSize <= math.MaxInt32 {
			return int(h.FrameContentSize)
		}
	case kgo.CodecGzip:
		if len(compressed) >= 18 { // ISIZE: the last member's size, mod 2^32
			return max(int(binary.LittleEndian.Uint32(compressed[len(compressed)-4:])), guess/4)
		}
	case kgo.CodecLz4:
		// A frame: magic, FLG (content size present: bit 3), BD, then
		// the content size.
		if len(compressed) >= 14 && binary.LittleEndian.Uint32(compressed) == 0x184D2204 && compressed[4]&0x08 != 0 {
			if n := binary.LittleEndian.Uint64(compressed[6:14]); n <= math.MaxInt32 {
				return int(n)
			}
		}
	}
	return guess
}

// letGo gives rec's Kafka record back to the pools it came from (a record
// not fetched through them is left to the collector) and forgets it.
// Called under committer.mu once the record's last piece ended.
func letGo(rec *record) {
	if rec.kr != nil {
		rec.kr.Recycle()
	}
	rec.kr = nil
}

// ownedRequest is req with its data in bytes of its own: a start request
// may outlive its record (a waiter taking the start over, a retry), whose
// value goes back to the pools when the record ends.
func ownedRequest(req decide.StartRequest) decide.StartRequest {
	req.Input.Data = bytes.Clone(req.Input.Data)
	req.Input.DataBase64 = bytes.Clone(req.Input.DataBase64)
	if req.Signal != nil {
		s := *req.Signal
		s.Input.Data = bytes.Clone(s.Input.Data)
		s.Input.DataBase64 = bytes.Clone(s.Input.DataBase64)
		req.Signal = &s
	}
	return req
}
