package schedule

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the scheduler's series, labelled by trigger name (a fixed
// set from the config, never a workflow ID).
type metrics struct {
	fires    *prometheus.CounterVec // trigger, outcome
	starts   *prometheus.CounterVec // trigger, result
	lag      *prometheus.GaugeVec
	next     *prometheus.GaugeVec
	interval *prometheus.GaugeVec
	lastFire *prometheus.GaugeVec
	paused   *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer, triggers []string) (*metrics, error) {
	m := &metrics{
		fires: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dedup_schedule_fires_total",
			Help: "Due schedule slots by outcome, counted once by the replica that decided them: on_time, catchup (run late), compressed (covered by one compressed run), skipped (misfired, never run), skipped_overlap (not run: overlap skip, the previous run still open)."},
			[]string{"trigger", "outcome"}),
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dedup_schedule_starts_total",
			Help: "Schedule fires sent to Temporal by result: started, duplicate (already started: a replay), failed (refused for good), conflict."},
			[]string{"trigger", "result"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dedup_schedule_lag_seconds",
			Help: "Seconds between the nominal time of this replica's latest schedule start and the start."}, []string{"trigger"}),
		next: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dedup_schedule_next_fire_timestamp_seconds",
			Help: "Unix time of the trigger's next slot (after the newest slot decided; while paused, after now)."}, []string{"trigger"}),
		interval: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dedup_schedule_interval_seconds",
			Help: "Seconds between the trigger's newest decided slot and its next one: its current interval."}, []string{"trigger"}),
		lastFire: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dedup_schedule_last_fire_timestamp_seconds",
			Help: "Unix time of the nominal time of the trigger's newest started run (its creation while none ran)."}, []string{"trigger"}),
		paused: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dedup_schedule_paused",
			Help: "1 while the trigger is paused (dedup schedule pause)."}, []string{"trigger"}),
	}
	for _, t := range triggers {
		for _, o := range Outcomes {
			m.fires.WithLabelValues(t, string(o))
		}
		for _, r := range []string{"started", "duplicate", "failed", "conflict"} {
			m.starts.WithLabelValues(t, r)
		}
	}
	for _, c := range []prometheus.Collector{m.fires, m.starts, m.lag, m.next, m.interval, m.lastFire, m.paused} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering schedule metrics: %w", err)
		}
	}
	return m, nil
}
