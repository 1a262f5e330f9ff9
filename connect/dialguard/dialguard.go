// Package dialguard is the rule that a credential crosses a network only
// over TLS that verifies the server, checked where it can be: at the dial,
// against the address actually dialled.
//
// A Kafka client dials the seed brokers its config names, then every
// broker the metadata advertises. A seed on this machine (an SSH tunnel, a
// port-forward, a local proxy) may advertise brokers that are not: a check
// of the configured seeds alone would let SASL (a PLAIN password, a SCRAM
// exchange, an OAUTHBEARER token, an AWS_MSK_IAM signature) go to them in
// plaintext. KafkaDialer checks each connection instead: with credentials,
// and without TLS that verifies the broker, it connects only to an address
// on this machine (127.0.0.0/8 or ::1; a name is resolved at the dial and
// each address it resolves to is checked before the connection is opened,
// so a name that resolves only to loopback is on this machine, and a name
// that also resolves elsewhere reaches only its loopback addresses). The
// refusal happens before any byte is sent, and names the broker.
//
// The exception is an explicit setting named allow_insecure
// (kafka.allow_insecure, temporal.allow_insecure), as postgres.allow_insecure.
package dialguard

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
)

// RefusedError is a connection refused because a credential would reach
// an address not on this machine unprotected.
type RefusedError struct {
	// Addr is the address asked for (a broker's host:port, as Kafka
	// advertises or the config names it); IP the address it resolved to.
	Addr, IP string
	// How is how the credential would travel: "without TLS" or "over TLS
	// without verifying the server's certificate".
	How string
	// What is the credential ("kafka.sasl's credentials"), Fix the
	// setting that protects it and Allow the one that accepts the risk.
	What, Fix, Allow string
}

func (e *RefusedError) Error() string {
	addr := e.Addr
	if e.IP != "" && e.IP != hostOf(e.Addr) {
		addr += " (" + e.IP + ")"
	}
	return fmt.Sprintf("refusing to connect to %s, not on this machine: %s would go to it %s; %s, or accept the risk with %s",
		addr, e.What, e.How, e.Fix, e.Allow)
}

// Loopback reports whether ip is on this machine: 127.0.0.0/8 or ::1
// (IPv4-mapped loopback included).
func Loopback(ip net.IP) bool { return ip != nil && ip.IsLoopback() }

// LoopbackHost reports whether a configured host (a name or an IP, with
// no port) is on this machine as far as a check of the config can tell:
// localhost, or a loopback IP. The dial checks the address it resolves to.
func LoopbackHost(host string) bool {
	return strings.EqualFold(host, "localhost") || Loopback(net.ParseIP(host))
}

// Unverified reports whether tc (nil: no TLS) lets a client talk to a
// server it has not verified: no TLS, or InsecureSkipVerify without a
// verification of its own (VerifyConnection or VerifyPeerCertificate, as
// connect/clienttls sets for a CA file read at each handshake). It
// returns how, for errors.
func Unverified(tc *tls.Config) (how string, bad bool) {
	switch {
	case tc == nil:
		return "without TLS", true
	case tc.InsecureSkipVerify && tc.VerifyConnection == nil && tc.VerifyPeerCertificate == nil:
		return "over TLS without verifying the server's certificate", true
	}
	return "", false
}

// LoopbackOnly returns a copy of nd that opens connections to addresses
// on this machine only: every other address it resolves to is refused,
// before the connection is opened, with refuse's error for (the address
// asked for, the IP).
func LoopbackOnly(nd *net.Dialer, addr string, refuse func(addr, ip string) error) *net.Dialer {
	d := *nd
	prev := nd.Control
	d.ControlContext = nil
	d.Control = func(network, address string, c syscall.RawConn) error {
		ip := net.ParseIP(hostOf(address))
		if !Loopback(ip) {
			return refuse(addr, hostOf(address))
		}
		if prev != nil {
			return prev(network, address, c)
		}
		return nil
	}
	return &d
}

// KafkaDialer is the dial function (kgo.Dialer) of a Kafka client: TLS
// when tlsFor is not nil (its config for the broker's host), plaintext
// otherwise. When the client sends SASL (sasl) and allowInsecure is
// false, a broker is reached without TLS, or over TLS that does not
// verify it, only at an address on this machine; any other is refused
// (*RefusedError, wrapped in the dial's *net.OpError) before a byte is
// sent.
func KafkaDialer(tlsFor func(host string) *tls.Config, sasl, allowInsecure bool) func(ctx context.Context, network, addr string) (net.Conn, error) {
	base := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 5 * time.Minute} // franz-go's own dialer's
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host := hostOf(addr)
		var tc *tls.Config
		if tlsFor != nil {
			tc = tlsFor(host)
		}
		nd := base
		if how, bad := Unverified(tc); sasl && !allowInsecure && bad {
			nd = LoopbackOnly(base, addr, func(addr, ip string) error {
				fix := "turn kafka.tls on (enabled: true, or its files)"
				if tc != nil {
					fix = "verify the broker's certificate (drop kafka.tls.insecure_skip_verify; kafka.tls.ca_file for a private CA)"
				}
				return &RefusedError{Addr: addr, IP: ip, How: how, What: "kafka.sasl's credentials",
					Fix: fix, Allow: "kafka.allow_insecure: true"}
			})
		}
		if tc == nil {
			return nd.DialContext(ctx, network, addr)
		}
		return (&tls.Dialer{NetDialer: nd, Config: tc}).DialContext(ctx, network, addr)
	}
}

// GuardKafka returns opts, the options of a Kafka client that someone
// else built (the producer client's Config.KafkaOpts, the router's
// Options.KafkaOpts), with KafkaDialer in place of franz-go's own dialer
// when they send SASL (kgo.SASL): with the same TLS (kgo.DialTLSConfig),
// or none. A kgo.Dialer of the caller's own is the caller's to check (it
// may tunnel, or do TLS itself): opts are returned as they are, as they
// are when no SASL is set. kgo.Dialer(nil) is no dialer of the caller's
// (franz-go's own plaintext one): it is guarded. dedup's own clients take KafkaDialer already
// (processor.Config.ClientOpts).
func GuardKafka(opts []kgo.Opt, allowInsecure bool) ([]kgo.Opt, error) {
	probe, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	mechs, _ := probe.OptValue(kgo.SASL).([]sasl.Mechanism)
	tc, _ := probe.OptValue(kgo.DialTLSConfig).(*tls.Config)
	probe.Close()
	if len(mechs) == 0 {
		return opts, nil
	}
	var tlsFor func(string) *tls.Config
	if tc != nil {
		// (franz-go refuses kgo.Dialer with kgo.DialTLSConfig: no
		// dialer of the caller's.)
		tlsFor = func(host string) *tls.Config {
			c := tc.Clone()
			if c.ServerName == "" {
				c.ServerName = host
			}
			return c
		}
	} else if ownDialer(opts) {
		return opts, nil
	}
	return append(append([]kgo.Opt(nil), opts...), kgo.DialTLSConfig(nil), kgo.Dialer(KafkaDialer(tlsFor, true, allowInsecure))), nil
}

// ownDialer reports whether opts leave a kgo.Dialer of the caller's own: a
// non-nil one. kgo.Dialer(nil), as the last kgo.Dialer, is franz-go's own
// plaintext dialer, as no kgo.Dialer is. franz-go refuses a non-nil
// kgo.Dialer with kgo.DialTLSConfig before it fills in its own dialer, so
// only a non-nil one makes the probe fail (and were franz-go to stop
// refusing, every dialer would be guarded: the safe side).
func ownDialer(opts []kgo.Opt) bool {
	probe, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...), kgo.DialTLSConfig(&tls.Config{}))...)
	if err != nil {
		return true
	}
	probe.Close()
	return false
}

func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}
