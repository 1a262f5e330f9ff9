package ingress

import (
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits are the ingress's limits: a request rate per tenant and a cap on
// the requests one process answers at once. See app.IngressLimits for the
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
type limiter struct {
	l    Limits
	slot chan struct{} // nil: no cap

	mu      sync.Mutex
	tenants map[string]*rate.Limiter // bounded by the tokens file's tenants
	busy    map[string]int           // slots held per tenant
}

func newLimiter(l Limits) *limiter {
	lim := &limiter{l: l, tenants: map[string]*rate.Limiter{}, busy: map[string]int{}}
	if l.MaxConcurrent > 0 {
		lim.slot = make(chan struct{}, l.MaxConcurrent)
		if lim.l.MaxConcurrentPerTenant <= 0 {
			lim.l.MaxConcurrentPerTenant = max(1, l.MaxConcurrent/2)
		}
	}
	return lim
}

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
func (lim *limiter) acquire(tenant string) bool {
	if lim.slot == nil {
		return true
	}
	if tenant != "" {
		lim.mu.Lock()
		if lim.busy[tenant] >= lim.l.MaxConcurrentPerTenant {
			lim.mu.Unlock()
			return false
		}
		lim.busy[tenant]++
		lim.mu.Unlock()
	}
	select {
	case lim.slot <- struct{}{}:
		return true
	default:
		lim.untake(tenant)
		return false
	}
}

func (lim *limiter) untake(tenant string) {
	if tenant == "" {
		return
	}
	lim.mu.Lock()
	if lim.busy[tenant]--; lim.busy[tenant] == 0 {
		delete(lim.busy, tenant)
	}
	lim.mu.Unlock()
}

func (lim *limiter) release(tenant string) {
	if lim.slot != nil {
		<-lim.slot
		lim.untake(tenant)
	}
}
