package idempotency

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	keys       *prometheus.GaugeVec
	calls      *prometheus.CounterVec
	takeovers  prometheus.Counter
	lostLeases prometheus.Counter
	reaped     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		keys: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dedup_idempotency_keys",
			Help: "Live (unexpired) idempotency keys by state: in_progress, completed, failed, failed_permanent. Refreshed every 30s."}, []string{"state"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dedup_idempotency_calls_total",
			Help: "Calls of the key store by result: ran (this caller ran the effect), stored (answered from the store), busy (another holder's lease was live)."}, []string{"result"}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{Name: "dedup_idempotency_takeovers_total",
			Help: "Keys taken over after their holder's lease expired without renewal (a crashed or stalled holder): the effect runs again under the same key."}),
		lostLeases: prometheus.NewCounter(prometheus.CounterOpts{Name: "dedup_idempotency_lost_leases_total",
			Help: "Holders that found their lease taken over when their call ended: the effect may have run twice."}),
		reaped: prometheus.NewCounter(prometheus.CounterOpts{Name: "dedup_idempotency_reaped_keys_total",
			Help: "Expired idempotency keys deleted by the reaper."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.keys, m.calls, m.takeovers, m.lostLeases, m.reaped} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("registering idempotency metrics: one store per registry: %w", err)
			}
			return nil, fmt.Errorf("registering idempotency metrics: %w", err)
		}
	}
	return m, nil
}
