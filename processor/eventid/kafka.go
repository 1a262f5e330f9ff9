package eventid

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
)

// FromKafka is the part of a franz-go record the decoder reads: the one
// conversion every caller of Decode and SignTenant (the router, the
// producer client, the operators' tools, the lab) uses. It shares kr's
// headers, clipped: an append to the Record's grows a copy, never kr's.
func FromKafka(kr *kgo.Record) Record {
	return Record{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset, Key: kr.Key, Value: kr.Value, Headers: slices.Clip(kr.Headers)}
}
