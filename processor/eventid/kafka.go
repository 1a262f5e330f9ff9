package eventid

import "github.com/twmb/franz-go/pkg/kgo"

// FromKafka is the part of a franz-go record the decoder reads: the one
// conversion every caller of Decode and SignTenant (the router, the
// producer client, the operators' tools, the lab) uses.
func FromKafka(kr *kgo.Record) Record {
	hs := make([]Header, len(kr.Headers))
	for i, h := range kr.Headers {
		hs[i] = Header{Key: h.Key, Value: h.Value}
	}
	return Record{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset, Key: kr.Key, Value: kr.Value, Headers: hs}
}
