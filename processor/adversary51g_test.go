package processor

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func adv51gLagWatch(t *testing.T, reset string) (*lagWatch, *watched) {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry(), []string{"t"})
	if err != nil {
		t.Fatal(err)
	}
	l := newLagWatch(Config{Topics: []string{"t"}, ResetOffset: reset}, slog.New(slog.NewTextHandler(io.Discard, nil)), m)
	w := l.assign(topicPartition{topic: "t", partition: 0}, context.Background(), 3)
	return l, w
}

func adv51gLost(t *testing.T, l *lagWatch) float64 {
	t.Helper()
	var m dto.Metric
	if err := l.lost.WithLabelValues("t").Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// adversary 51g: a gap from 3 first seen up to 6 with the log starting at 6
// (3 lost), seen again under a later assignment up to 10 by a fetch whose
// broker (a new leader, a follower: its log start lags the old leader's)
// says the log starts at 5. noteGap counts g.lost - c.lost = 2 - 3 = -1:
// prometheus' Counter.Add panics on a negative value, taking the router down.
func TestAGapSeenAgainWithAnEarlierLogStartNeverCountsNegativeRecords(t *testing.T) {
	l, w := adv51gLagWatch(t, "earliest")
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noteGap(w, 3, 6, 6)
	if got := adv51gLost(t, l); got != 3 {
		t.Fatalf("setup: %v lost, want 3", got)
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("noteGap panicked on the second sighting (from 3, to 10, log start 5): %v", r)
			}
		}()
		l.noteGap(w, 3, 10, 5)
	}()
	if got := adv51gLost(t, l); got < 3 {
		t.Fatalf("%v records counted lost after the second sighting, fewer than the 3 counted before", got)
	}
}

// adversary 51g: a gap from 3 counted up to 6 (log start 6: 3 deleted),
// seen again under a later assignment up to 8 (6 and 7 compacted away or
// transaction markers) with the log still starting at 6: retention deleted
// nothing since. noteGap counts g.lost - c.lost = 0 from c.to and logs an
// error "records deleted by retention ... they are lost" with records 0
// and to 5 before from 6: an operator is paged for nothing lost.
func TestAGapSeenAgainWhereRetentionDeletedNothingSinceLogsNoLoss(t *testing.T) {
	var buf bytes.Buffer
	m, err := newMetrics(prometheus.NewRegistry(), []string{"t"})
	if err != nil {
		t.Fatal(err)
	}
	l := newLagWatch(Config{Topics: []string{"t"}, ResetOffset: "earliest"}, slog.New(slog.NewTextHandler(&buf, nil)), m)
	w := l.assign(topicPartition{topic: "t", partition: 0}, context.Background(), 3)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noteGap(w, 3, 6, 6)
	if got := adv51gLost(t, l); got != 3 {
		t.Fatalf("setup: %v lost, want 3", got)
	}
	buf.Reset()
	l.noteGap(w, 3, 8, 6)
	if got := adv51gLost(t, l); got != 3 {
		t.Fatalf("%v lost, want still 3", got)
	}
	if buf.Len() > 0 {
		t.Fatalf("nothing more was deleted, yet logged: %s", strings.TrimSpace(buf.String()))
	}
}
