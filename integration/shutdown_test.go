package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRouterStopsWithinDrainTimeoutWhileJoiningAGroupWithDeadMembers: a
// router given SIGTERM while its join of the consumer group waits on a
// member that was kill -9'd (the group still lists it until its session
// times out) exits 0 within drain_timeout: it does not wait for the join
// to finish, which would outlast the pod's grace period and have it
// killed mid-drain (processor/router.go, Router.leave).
//
// Two routers join a group with a 30 s session and rebalance timeout;
// one is kill -9'd; a third starts, and its join is held until the
// rebalance timeout (kfake completes a rebalance when every listed member
// has rejoined or the timeout passes). Once the group is rebalancing and
// the third router's /readyz says it is joining, it gets SIGTERM.
//
// Bound: drain_timeout (3 s) plus 5 s for the process's own exit (closing
// its PostgreSQL pool and Temporal client, being reaped) on a shared
// machine: 8 s, far below the 30 s the join is held, so a router that
// waits for the join cannot pass.
func TestRouterStopsWithinDrainTimeoutWhileJoiningAGroupWithDeadMembers(t *testing.T) {
	const margin = 5 * time.Second
	e := newEnv(t, 4)
	cfg := e.config()
	cfg.Kafka.SessionTimeout = 30 * time.Second
	cfg.Kafka.RebalanceTimeout = 30 * time.Second
	cfg.Kafka.DrainTimeout = 3 * time.Second
	cfg.Log.Level = "warn"

	r1 := e.spawn("r1", cfg)
	r2 := e.spawn("r2", cfg)
	if !eventually(45*time.Second, func() bool {
		state, members := e.groupState()
		return state == "Stable" && len(members) == 2 && members[0] > 0 && members[1] > 0 &&
			r1.ready() == 200 && r2.ready() == 200
	}) {
		state, members := e.groupState()
		t.Fatalf("the group did not settle with two routers: %s %v", state, members)
	}

	r2.signal(t, syscall.SIGKILL)
	if code := r2.wait(t, 10*time.Second); code != -1 {
		t.Fatalf("r2 exited %d, want killed", code)
	}

	r3, logs := e.spawnLogged("r3", "run", cfg)
	if !eventually(20*time.Second, func() bool {
		state, _ := e.groupState()
		code, body := r3.readyz()
		return state == "PreparingRebalance" && code != 200 && strings.Contains(body, "router: joining")
	}) {
		state, members := e.groupState()
		code, body := r3.readyz()
		t.Fatalf("r3 never seen joining a rebalancing group: group %s %v, /readyz %d %q", state, members, code, body)
	}

	t0 := time.Now()
	r3.signal(t, syscall.SIGTERM)
	code := r3.wait(t, time.Minute)
	took := time.Since(t0)
	t.Logf("r3 exited %d %v after SIGTERM (drain_timeout %v)", code, took.Round(10*time.Millisecond), cfg.Kafka.DrainTimeout)
	if code != 0 {
		t.Errorf("r3 exited %d after SIGTERM, want 0", code)
	}
	if took > cfg.Kafka.DrainTimeout+margin {
		t.Errorf("r3 took %v to exit after SIGTERM while joining, want within drain_timeout %v + %v", took, cfg.Kafka.DrainTimeout, margin)
	}
	if state, members := e.groupState(); state != "PreparingRebalance" {
		t.Errorf("the group is %s %v after r3 exited: the join was not held while r3 stopped, the test proves nothing", state, members)
	}
	logs.mu.Lock()
	held := strings.Contains(logs.b.String(), "leaving the consumer group did not finish within drain_timeout")
	logs.mu.Unlock()
	if !held {
		t.Error("r3 did not log that it stopped without waiting for the leave: its leave was not held up by the join")
	}
}
