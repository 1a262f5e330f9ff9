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
}

// limiter applies Limits.
type limiter struct {
	l    Limits
	slot chan struct{} // nil: no cap

	mu      sync.Mutex
	tenants map[string]*rate.Limiter // bounded by the tokens file's tenants
}

func newLimiter(l Limits) *limiter {
	lim := &limiter{l: l, tenants: map[string]*rate.Limiter{}}
	if l.MaxConcurrent > 0 {
		lim.slot = make(chan struct{}, l.MaxConcurrent)
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

// acquire takes one of the process's slots without waiting; release gives
// it back. false: every slot is taken.
func (lim *limiter) acquire() bool {
	if lim.slot == nil {
		return true
	}
	select {
	case lim.slot <- struct{}{}:
		return true
	default:
		return false
	}
}

func (lim *limiter) release() {
	if lim.slot != nil {
		<-lim.slot
	}
}
