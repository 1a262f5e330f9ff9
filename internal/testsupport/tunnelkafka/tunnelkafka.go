// Package tunnelkafka is a kfake cluster as a client sees it through an
// SSH tunnel or a port-forward: its seed is a loopback address, and its
// metadata advertises the brokers at an address of this machine that is
// not loopback (its first non-loopback IPv4 address), as a remote
// cluster's would be. The cluster listens on every interface, so both
// addresses reach it, and it counts the connections that arrive at the
// advertised address: what a client sent off loopback.
package tunnelkafka

import (
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Cluster is the running cluster.
type Cluster struct {
	*kfake.Cluster
	// Seed is the loopback address of the first broker; Advertised its
	// address in the metadata (host:port, the non-loopback IP).
	Seed, Advertised string
	remote           atomic.Int64
}

// RemoteConns is how many connections arrived at the advertised,
// non-loopback address.
func (c *Cluster) RemoteConns() int64 { return c.remote.Load() }

// Start starts a one-broker cluster with opts (kfake.EnableSASL, …), closed
// with t. It skips t on a machine without a non-loopback IPv4 address.
func Start(t testing.TB, opts ...kfake.Opt) *Cluster {
	t.Helper()
	ip := nonLoopback(t)
	c := &Cluster{}
	listen := func(network, address string) (net.Listener, error) {
		_, port, err := net.SplitHostPort(address)
		if err != nil {
			return nil, err
		}
		ln, err := net.Listen(network, net.JoinHostPort("", port))
		if err != nil {
			return nil, err
		}
		return &advertising{Listener: ln, ip: ip, remote: &c.remote}, nil
	}
	kc, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.ListenFn(listen)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	c.Cluster = kc
	c.Advertised = kc.ListenAddrs()[0]
	_, port, _ := net.SplitHostPort(c.Advertised)
	c.Seed = net.JoinHostPort("127.0.0.1", port)
	return c
}

// advertising is a listener on every interface whose address is ip's:
// kfake advertises a broker at its listener's address.
type advertising struct {
	net.Listener
	ip     net.IP
	remote *atomic.Int64
}

func (l *advertising) Addr() net.Addr {
	port, _ := strconv.Atoi(portOf(l.Listener.Addr().String()))
	return &net.TCPAddr{IP: l.ip, Port: port}
}

func (l *advertising) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err == nil {
		if a, ok := conn.LocalAddr().(*net.TCPAddr); ok && a.IP.Equal(l.ip) {
			l.remote.Add(1)
		}
	}
	return conn, err
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

func nonLoopback(t testing.TB) net.IP {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP.To4()
		}
	}
	t.Skip("this machine has no non-loopback IPv4 address to advertise the brokers at")
	return nil
}
