package app

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
)

// temporalMetrics puts the Temporal SDK client's metrics (request counts,
// failures and latencies, by operation) into dedup's Prometheus registry,
// without the tally dependency: counters get _total, timers become
// histograms in seconds. Tags become labels; a metric name seen again with
// other tag keys than its first use is dropped rather than panicking.
type temporalMetrics struct {
	reg  prometheus.Registerer
	mu   sync.Mutex
	vecs map[string]*sdkVec
}

type sdkVec struct {
	labels []string
	c      *prometheus.CounterVec
	g      *prometheus.GaugeVec
	h      *prometheus.HistogramVec
}

func newTemporalMetrics(reg prometheus.Registerer) client.MetricsHandler {
	return temporalHandler{m: &temporalMetrics{reg: reg, vecs: map[string]*sdkVec{}}}
}

type temporalHandler struct {
	m    *temporalMetrics
	tags map[string]string
}

func (h temporalHandler) WithTags(tags map[string]string) client.MetricsHandler {
	merged := make(map[string]string, len(h.tags)+len(tags))
	for k, v := range h.tags {
		merged[k] = v
	}
	for k, v := range tags {
		merged[k] = v
	}
	return temporalHandler{m: h.m, tags: merged}
}

var invalidMetricChars = regexp.MustCompile(`[^a-zA-Z0-9_]`)

func (h temporalHandler) vec(kind, name string) (*sdkVec, []string) {
	name = invalidMetricChars.ReplaceAllString(name, "_")
	switch kind {
	case "counter":
		if !strings.HasSuffix(name, "_total") {
			name += "_total"
		}
	case "timer":
		name += "_seconds"
	}
	keys := make([]string, 0, len(h.tags))
	for k := range h.tags {
		keys = append(keys, invalidMetricChars.ReplaceAllString(k, "_"))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	values := make([]string, len(keys))
	for k, v := range h.tags {
		i, _ := slices.BinarySearch(keys, invalidMetricChars.ReplaceAllString(k, "_"))
		values[i] = v
	}
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	v, ok := h.m.vecs[name]
	if ok {
		if !slices.Equal(v.labels, keys) {
			return nil, nil
		}
		return v, values
	}
	v = &sdkVec{labels: keys}
	help := "Temporal SDK client metric " + name + "."
	var c prometheus.Collector
	switch kind {
	case "counter":
		v.c = prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, keys)
		c = v.c
	case "gauge":
		v.g = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, keys)
		c = v.g
	default:
		v.h = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, keys)
		c = v.h
	}
	if err := h.m.reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			h.m.vecs[name] = &sdkVec{labels: nil}
			return nil, nil
		}
	}
	h.m.vecs[name] = v
	return v, values
}

type counterFunc func(int64)

func (f counterFunc) Inc(d int64) { f(d) }

type gaugeFunc func(float64)

func (f gaugeFunc) Update(v float64) { f(v) }

type timerFunc func(time.Duration)

func (f timerFunc) Record(d time.Duration) { f(d) }

func (h temporalHandler) Counter(name string) client.MetricsCounter {
	v, values := h.vec("counter", name)
	if v == nil || v.c == nil {
		return counterFunc(func(int64) {})
	}
	c := v.c.WithLabelValues(values...)
	return counterFunc(func(d int64) { c.Add(float64(d)) })
}

func (h temporalHandler) Gauge(name string) client.MetricsGauge {
	v, values := h.vec("gauge", name)
	if v == nil || v.g == nil {
		return gaugeFunc(func(float64) {})
	}
	g := v.g.WithLabelValues(values...)
	return gaugeFunc(g.Set)
}

func (h temporalHandler) Timer(name string) client.MetricsTimer {
	v, values := h.vec("timer", name)
	if v == nil || v.h == nil {
		return timerFunc(func(time.Duration) {})
	}
	o := v.h.WithLabelValues(values...)
	return timerFunc(func(d time.Duration) { o.Observe(d.Seconds()) })
}
