package schemaregistry

import (
	"fmt"
	"io"
	"net/http"
)

// MaxResponseBytes bounds one answer of the registry. pkg/sr reads an
// answer into memory whole; a schema is rarely more than a few hundred
// KiB, so an answer past this is a registry, or a proxy in front of it,
// answering without end. It is an error for the request (transient, like
// any answer that is not the registry's: the router holds the batch and
// reports the registry down), never read to its end.
const MaxResponseBytes = 16 << 20

// limitedTransport cuts every answer's body off at MaxResponseBytes.
type limitedTransport struct{ next http.RoundTripper }

func (t limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &limitedBody{rc: resp.Body, left: MaxResponseBytes}
	return resp, nil
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more than the bound tells a body of exactly the bound.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n > 0 {
			return 0, fmt.Errorf("reading the schema registry's answer: larger than %d bytes", MaxResponseBytes)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
