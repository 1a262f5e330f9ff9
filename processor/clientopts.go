package processor

import (
	"crypto/tls"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/connect/clienttls"
	"github.com/dedupio/dedup/connect/dialguard"
)

// ClientOpts are the options every Kafka client of dedup shares, built
// from c: the seed brokers, the fetch isolation level (IsolationLevel), TLS
// (TLS) and SASL (SASL; AWS_MSK_IAM may read the AWS_* environment). New
// applies them to the router's client; the operators' tools, the producer
// client and the ingress take them too, so that a setting of c is never
// validated and then ignored. Certificate and secret files are read here
// once (a missing one is an error naming its key) and again, when they
// changed, at each new connection.
//
// With TLS or SASL on, the dial is dedup's own (connect/dialguard's
// KafkaDialer): each broker's tls.Config is built for its host at the
// dial, so that the CA file is read as it is then; and every broker the
// client dials (the seeds and every one the metadata advertises) is
// checked: SASL without TLS that verifies the broker goes only to an
// address on this machine, unless AllowInsecure. With neither, the
// options set no dialer, and a caller may give its own.
func (c *Config) ClientOpts() ([]kgo.Opt, error) {
	// The isolation level matters to consumers only; producers and admin
	// clients ignore it.
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...), c.FetchIsolation()}
	files, err := clienttls.Load(c.TLS, "kafka.tls")
	if err != nil {
		return nil, err
	}
	m, err := c.SASL.Build()
	if err != nil {
		return nil, err
	}
	if err := c.SASL.CheckBrokers(c.Brokers); err != nil {
		return nil, err
	}
	if m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	if files == nil && m == nil {
		return opts, nil
	}
	var tlsFor func(host string) *tls.Config
	if files != nil {
		tlsFor = files.ClientConfig
	}
	return append(opts, kgo.Dialer(dialguard.KafkaDialer(tlsFor, m != nil, c.AllowInsecure))), nil
}
