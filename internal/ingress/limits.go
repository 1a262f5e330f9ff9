package ingress

import (
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits are the ingress's limits: a request rate per tenant and a cap on
// the requests one process answers at once. See ingressconfig.Limits for the
// memory bound they give.
type Limits struct {
	// Rate is each tenant's requests per second, Burst how many it may
	// send at once above it; Rate 0: no rate limit.
	Rate  float64
	Burst int
	// MaxConcurrent caps the requests answered at once; 0: no cap.
	MaxConcurrent int
	// MaxConcurrentPerTenant caps one tenant's share of them, so that a
	// tenant sending its bodies slowly cannot take every slot; 0: half of
	// MaxConcurrent (at least 1). The anonymous caller (no tokens file)
	// has the whole of MaxConcurrent.
	MaxConcurrentPerTenant int
}

// limiter applies Limits.
//
// Two pools of slots, each with a share per tenant: the requests answered
// at once (MaxConcurrent) and, before that, the bodies being read
// (2 x MaxConcurrent): a body is read before its request takes an answer
// slot, so that slow senders hold no answer slot, and the reads have a cap
// of their own, so that bodies still arriving take bounded memory
// (ingressconfig.Limits: (2 x MaxConcurrent reading + 2 x MaxConcurrent
// answered) x the largest body).
type limiter struct {
	l       Limits
	slot    *pool // requests answered; nil: no cap
	reading *pool // bodies being read; nil: no cap

	mu      sync.Mutex
	tenants map[string]*rate.Limiter // bounded by the tokens file's tenants
}

func newLimiter(l Limits) *limiter {
	lim := &limiter{l: l, tenants: map[string]*rate.Limiter{}}
	if l.MaxConcurrent > 0 {
		if lim.l.MaxConcurrentPerTenant <= 0 {
			lim.l.MaxConcurrentPerTenant = max(1, l.MaxConcurrent/2)
		}
		lim.slot = newPool(l.MaxConcurrent, lim.l.MaxConcurrentPerTenant)
		lim.reading = newPool(2*l.MaxConcurrent, lim.l.MaxConcurrentPerTenant)
	}
	return lim
}

// pool is a number of slots with a share per tenant ("" is the anonymous
// caller: no share).
type pool struct {
	slot  chan struct{}
	share int

	mu   sync.Mutex
	busy map[string]int // slots held per tenant
}

func newPool(n, share int) *pool {
	return &pool{slot: make(chan struct{}, n), share: share, busy: map[string]int{}}
}

// take takes a slot for tenant without waiting; false: every slot is
// taken, or the tenant holds its share.
func (p *pool) take(tenant string) bool {
	if p == nil {
		return true
	}
	if tenant != "" {
		p.mu.Lock()
		if p.busy[tenant] >= p.share {
			p.mu.Unlock()
			return false
		}
		p.busy[tenant]++
		p.mu.Unlock()
	}
	select {
	case p.slot <- struct{}{}:
		return true
	default:
		p.untake(tenant)
		return false
	}
}

func (p *pool) untake(tenant string) {
	if tenant == "" {
		return
	}
	p.mu.Lock()
	if p.busy[tenant]--; p.busy[tenant] == 0 {
		delete(p.busy, tenant)
	}
	p.mu.Unlock()
}

func (p *pool) give(tenant string) {
	if p != nil {
		<-p.slot
		p.untake(tenant)
	}
}

// reads takes one of the slots for a body being read; doneReading gives
// it back.
func (lim *limiter) reads(tenant string) bool  { return lim.reading.take(tenant) }
func (lim *limiter) doneReading(tenant string) { lim.reading.give(tenant) }

// allow takes one request of tenant from its rate; false: over it, and
// retryAfter is when one more would be allowed (whole seconds, at least
// 1, for the Retry-After header).
func (lim *limiter) allow(tenant string, now time.Time) (ok bool, retryAfter string) {
	if lim.l.Rate <= 0 {
		return true, ""
	}
	lim.mu.Lock()
	rl := lim.tenants[tenant]
	if rl == nil {
		rl = rate.NewLimiter(rate.Limit(lim.l.Rate), max(lim.l.Burst, 1))
		lim.tenants[tenant] = rl
	}
	lim.mu.Unlock()
	res := rl.ReserveN(now, 1)
	if !res.OK() {
		return false, "1"
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, strconv.Itoa(int(math.Ceil(d.Seconds())))
	}
	return true, ""
}

// acquire takes one of the process's slots for tenant without waiting;
// release gives it back. false: every slot is taken, or the tenant holds
// its share ("" is the anonymous caller: no share).
func (lim *limiter) acquire(tenant string) bool { return lim.slot.take(tenant) }

func (lim *limiter) release(tenant string) { lim.slot.give(tenant) }
