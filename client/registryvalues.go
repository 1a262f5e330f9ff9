package client

import (
	"context"
	"errors"
)

// registryFramed is the client's decide.ValueReader: it reads no value
// in a schema registry's wire format (a zero byte first; JSON never
// starts with one), it refuses it. Routers with kafka.schema_registry
// decode such a value with the registry's schema and take its event ID
// and payload hash over the record it decodes to; the client has no
// registry to decode with, and an ID or hash it predicted from the raw
// bytes would never be the routers' (Send would report a re-sent record
// as a conflict). Prepare refuses it as undecodable, in CloudEvents
// binary mode too.
type registryFramed struct{}

func (registryFramed) Framed(v []byte) bool { return len(v) > 0 && v[0] == 0 }

func (registryFramed) Resolve(context.Context, [][]byte) error { return nil }

func (registryFramed) Decode([]byte) ([]byte, error) {
	return nil, errors.New("a value in a schema registry's wire format (a zero byte first): the client has no registry to decode it with; produce it with the registry's serializer, not through dedup's client")
}
