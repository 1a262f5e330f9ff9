package eventid

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
)

// FromKafka is the part of a franz-go record the decoder reads: the one
// conversion every caller of Decode and SignTenant (the router, the
// producer client, the operators' tools, the lab) uses. The Record's
// headers are a copy, the caller's to edit.
func FromKafka(kr *kgo.Record) Record {
	r := ReadKafka(kr)
	r.Headers = slices.Clone(r.Headers)
	return r
}

// ReadKafka is FromKafka without the copy, for a caller that only reads
// the Record (Decider.Decide: a record's decision allocates nothing for its
// headers). The Record shares kr's headers, clipped: an append grows a
// copy, but an edit in place (a value, a delete, a sort) edits kr's.
func ReadKafka(kr *kgo.Record) Record {
	return Record{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset, Key: kr.Key, Value: kr.Value, Headers: slices.Clip(kr.Headers)}
}
