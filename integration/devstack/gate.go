package devstack

import (
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Gate is a TCP forwarder in front of a server that tests open and close,
// to make a dependency unreachable without stopping it: the embedded
// Temporal server keeps its state in memory and cannot be restarted, so a
// test that needs "Temporal is down" points dedup at a gate instead.
// Closed, the gate's address refuses connections and the connections it
// forwarded are cut, as when the server is down; open, it forwards to the
// server. Its address never changes.
type Gate struct {
	target string
	addr   string

	mu    sync.Mutex
	l     net.Listener // nil while closed
	conns map[net.Conn]struct{}
}

// NewGate returns a gate to target on a free 127.0.0.1 port, open or
// closed.
func NewGate(target string, open bool) (*Gate, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	g := &Gate{target: target, addr: l.Addr().String(), conns: map[net.Conn]struct{}{}}
	if !open {
		if err := l.Close(); err != nil {
			return nil, fmt.Errorf("gate: %w", err)
		}
		return g, nil
	}
	g.mu.Lock()
	g.serve(l)
	g.mu.Unlock()
	return g, nil
}

// Addr is where clients connect.
func (g *Gate) Addr() string { return g.addr }

// Open starts forwarding again, on the same address.
func (g *Gate) Open() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.l != nil {
		return nil
	}
	var l net.Listener
	var err error
	for tries := 0; tries < 50; tries++ { // the port may linger a moment after close
		if l, err = net.Listen("tcp", g.addr); err == nil {
			g.serve(l)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("gate: reopening %s: %w", g.addr, err)
}

// Close refuses new connections and cuts the open ones.
func (g *Gate) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.l != nil {
		_ = g.l.Close()
		g.l = nil
	}
	for c := range g.conns {
		_ = c.Close()
		delete(g.conns, c)
	}
}

// serve accepts on l until it is closed; g.mu is held.
func (g *Gate) serve(l net.Listener) {
	g.l = l
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go g.forward(c)
		}
	}()
}

func (g *Gate) forward(c net.Conn) {
	up, err := net.DialTimeout("tcp", g.target, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	g.mu.Lock()
	if g.l == nil { // closed meanwhile
		g.mu.Unlock()
		_ = c.Close()
		_ = up.Close()
		return
	}
	g.conns[c], g.conns[up] = struct{}{}, struct{}{}
	g.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // until either side closes, or Close cuts both
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
	g.mu.Lock()
	delete(g.conns, c)
	delete(g.conns, up)
	g.mu.Unlock()
}
