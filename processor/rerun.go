package processor

import (
	"context"
	"log/slog"

	"github.com/dedupio/dedup/processor/decide"
)

// rerun decides whether a started workflow runs again: under
// allow_duplicate_failed_only when its last run failed, timed out, was
// terminated or cancelled; under allow_duplicate when it closed at all.
//
// A re-run starts first and is recorded after: j becomes the start of the
// generation after both the ledger's (the claim's) and the last run's
// own, and the marker moves the row to it. The redeliveries that race see
// the same last run and start the same generation, whose one request ID
// makes one run between them, however often it is re-driven. Nothing is
// written before the start, so a job that goes away (revoked, lost,
// crashed) leaves the row started at the older generation, never pending:
// the next copy's LastRun sees the run it made, if any, and acts on that.
// It reports whether j goes on to start; otherwise j is done.
func (s *startPool) rerun(ctx context.Context, j *job) bool {
	var run decide.Run
	err := s.health.retry(ctx, OpStart, func(ctx context.Context) error {
		var err error
		run, err = s.starter.LastRun(ctx, j.req.Namespace, j.req.WorkflowID)
		return err
	})
	if err != nil && !IsPermanent(err) { // revoked, lost or shutting down
		s.done(j, false)
		return false
	}
	// A permanent error: Temporal no longer knows the workflow (its
	// retention passed): nothing to run again.
	again := err == nil && j.req.ReusePolicy.RerunsAfter(run)
	if !again {
		return s.startInstead(j)
	}
	s.m.reruns.Inc()
	s.mu.Lock()
	j.req.Generation, j.check = max(j.req.Generation, run.Generation, 1)+1, false
	s.mu.Unlock()
	in, src := &j.req.Input, j.rec.kr
	logDecision(s.log, slog.LevelInfo, "rerun",
		decisionOf{eventID: in.EventID, rule: in.IDRule, topic: src.Topic, partition: src.Partition, offset: src.Offset},
		"workflow_id", j.req.WorkflowID, "generation", j.req.Generation, "last_run_id", run.ID, "reuse_policy", string(j.req.ReusePolicy))
	return true
}

// startInstead ends a check that runs nothing again: done, unless a copy
// waiting on it needs its own claim started (verdict new or re-drive: a
// pending row, e.g. claimed again after the purge), which the job then
// starts. When none does, the job leaves the in-flight map under the same
// lock, so a copy that needs a start and comes later gets a job of its own
// instead of finishing with this check.
func (s *startPool) startInstead(j *job) bool {
	s.mu.Lock()
	req := j.startReq
	if req == nil && s.starting[j.req.WorkflowID] == j {
		delete(s.starting, j.req.WorkflowID)
	}
	if req != nil {
		j.req, j.check, j.startReq = *req, false, nil
	}
	s.mu.Unlock()
	if req == nil {
		s.done(j, true)
		return false
	}
	return true
}
