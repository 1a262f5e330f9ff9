package processor

import (
	"bytes"
	"sync"
	"sync/atomic"

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
	bytes sync.Pool // *[]byte
	recs  sync.Pool // *[]kgo.Record
	// lent and back count the batches' Records lent and given back.
	lent, back atomic.Int64
}

// GetDecompressBytes is a buffer of the pool's, else one of four times
// the compressed size; franz-go grows it when the batch needs more and
// puts the grown one back.
func (p *fetchPools) GetDecompressBytes(compressed []byte, _ kgo.CompressionCodecType) []byte {
	if b, ok := p.bytes.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, 4*len(compressed))
}

// PutDecompressBytes takes back a batch's buffer, zeroed by franz-go.
func (p *fetchPools) PutDecompressBytes(b []byte) { p.bytes.Put(&b) }

// GetRecords is a slice of at least n Records.
func (p *fetchPools) GetRecords(n int) []kgo.Record {
	p.lent.Add(1)
	if s, ok := p.recs.Get().(*[]kgo.Record); ok && cap(*s) >= n {
		return (*s)[:0]
	}
	return make([]kgo.Record, 0, n)
}

// PutRecords takes back a batch's Records, zeroed.
func (p *fetchPools) PutRecords(s []kgo.Record) {
	p.back.Add(1)
	p.recs.Put(&s)
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
