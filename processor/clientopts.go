package processor

import (
	"crypto/tls"
	"errors"

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

// checkCallerDialer refuses a kgo.Dialer among a caller's options when
// the config turns TLS on: the caller's dialer would replace the dial
// that does the config's TLS (ClientOpts), and the client would speak
// plaintext to brokers the config says are reached over TLS. A dialer
// among opts is found as dialguard finds one: franz-go refuses a non-nil
// kgo.Dialer beside kgo.DialTLSConfig.
func (c *Config) checkCallerDialer(opts []kgo.Opt) error {
	if !c.TLS.On() || len(opts) == 0 {
		return nil
	}
	probe, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...), kgo.DialTLSConfig(&tls.Config{}))...)
	if err != nil {
		return errors.New("kafka.tls is on and Options.KafkaOpts sets a kgo.Dialer, which would dial without it: " +
			"leave kafka.tls off and do TLS in the dialer, or drop the dialer")
	}
	probe.Close()
	return nil
}
