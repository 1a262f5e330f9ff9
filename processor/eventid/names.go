package eventid

import (
	"strings"
	"sync"
	"sync/atomic"
)

// Names: an event's type and source are read as strings from every
// record, and a stream has few of them (order.created, demo-shop), so a
// Decoder keeps the ones it has seen and gives the same string again
// instead of a new one per record. What a stream can make it keep is
// bounded: at most maxNames names of at most maxNameBytes bytes each
// (16 KiB); a name past either limit is read as before, allocated, and
// never kept.
const (
	maxNames     = 128
	maxNameBytes = 128
)

// names is a Decoder's kept names: an immutable map, replaced whole
// (under mu) when a name is added, so that a lookup takes no lock.
type names struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]string]
}

// get is the kept string equal to b, if there is one. The lookup does
// not allocate: the compiler does not copy b for a map index.
func (n *names) get(b []byte) (string, bool) {
	if len(b) == 0 {
		return "", true
	}
	if n == nil {
		return "", false
	}
	m := n.m.Load()
	if m == nil {
		return "", false
	}
	s, ok := (*m)[string(b)]
	return s, ok
}

// intern is b as a string: the kept one when there is one, else a new
// one, which is kept while there is room.
func (n *names) intern(b []byte) string {
	if s, ok := n.get(b); ok {
		return s
	}
	s := string(b)
	n.keep(s, true)
	return s
}

// keep adds s, when there is room for it: s itself when it is its own
// string (owned), else a copy, since s may then be a substring of a
// record's other strings, which the names must not hold on to.
func (n *names) keep(s string, owned bool) {
	if n == nil || s == "" || len(s) > maxNameBytes {
		return
	}
	if m := n.m.Load(); m != nil {
		if _, ok := (*m)[s]; ok || len(*m) >= maxNames {
			return // kept already, or full: no lock taken
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	old := n.m.Load()
	var m map[string]string
	if old == nil {
		m = make(map[string]string, 1)
	} else {
		if _, ok := (*old)[s]; ok || len(*old) >= maxNames {
			return
		}
		m = make(map[string]string, len(*old)+1)
		for k, v := range *old {
			m[k] = v
		}
	}
	if !owned {
		s = strings.Clone(s)
	}
	m[s] = s
	n.m.Store(&m)
}
