package decide

import (
	"strings"
	"testing"

	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/schemas"
)

func TestRoutesMatch(t *testing.T) {
	rs := Routes{
		{ID: "a1", Match: Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q"},
		{ID: "a2", Match: Match{Type: "order.*"}, WorkflowType: "W", TaskQueue: "q", IDReusePolicy: ReuseAllowDuplicateFailedOnly},
		{ID: "a3", Match: Match{Type: "*", Source: "billing"}, WorkflowType: "W", TaskQueue: "q"},
	}
	if err := rs.Validate(); err != nil {
		t.Fatal(err)
	}
	if rs[0].IDReusePolicy != ReuseRejectDuplicate || rs[0].Key != KeyEventID {
		t.Fatalf("defaults not filled: %+v", rs[0])
	}
	ids := func(ev eventid.Event) string {
		var s []string
		for _, r := range rs.Match(&ev) {
			s = append(s, r.ID)
		}
		return strings.Join(s, ",")
	}
	cases := []struct {
		ev   eventid.Event
		want string
	}{
		{eventid.Event{Type: "order.created", Source: "shop"}, "a1,a2"},
		{eventid.Event{Type: "order.cancelled"}, "a2"},
		{eventid.Event{Type: "orders"}, ""},
		{eventid.Event{Type: "invoice.paid", Source: "billing"}, "a3"},
		{eventid.Event{Type: "order.created", Source: "billing"}, "a1,a2,a3"},
	}
	for _, c := range cases {
		if got := ids(c.ev); got != c.want {
			t.Errorf("%+v: got %q want %q", c.ev, got, c.want)
		}
	}
}

func TestRoutesValidate(t *testing.T) {
	ok := Route{ID: "a", Match: Match{Type: "t"}, WorkflowType: "W", TaskQueue: "q"}
	cases := map[string]func(*Route){
		"routes[0].id: empty":       func(r *Route) { r.ID = "" },
		"colon":                     func(r *Route) { r.ID = "a:b" },
		"routes[0].match.type":      func(r *Route) { r.Match.Type = "" },
		"routes[0].workflow_type":   func(r *Route) { r.WorkflowType = "" },
		"routes[0].task_queue":      func(r *Route) { r.TaskQueue = "" },
		"routes[0].id_reuse_policy": func(r *Route) { r.IDReusePolicy = "sometimes" },
		"routes[0].key":             func(r *Route) { r.Key = "offset" },
		"routes[0].definition.tasks[1].type": func(r *Route) {
			r.Definition = &schemas.ActivityDefinition{Tasks: []schemas.TaskSpec{{Type: "welcome_email"}, {Type: "a:b"}}}
		},
		"routes[0].definition.max_attempts": func(r *Route) { r.Definition = &schemas.ActivityDefinition{MaxAttempts: -1} },
		"routes[0].definition.schedule_to_close_seconds": func(r *Route) {
			r.Definition = &schemas.ActivityDefinition{ScheduleToCloseSeconds: -1}
		},
	}
	for want, mod := range cases {
		r := ok
		mod(&r)
		err := Routes{r}.Validate()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	// Task types the worker registers (not only webhook and noop) pass.
	user := ok
	user.Definition = &schemas.ActivityDefinition{Tasks: []schemas.TaskSpec{{Type: "send_welcome_email"}, {Type: "webhook"}}, MaxAttempts: 3}
	if err := (Routes{user}).Validate(); err != nil {
		t.Errorf("user task types: %v", err)
	}
	if err := (Routes{ok, ok}).Validate(); err == nil || !strings.Contains(err.Error(), "used twice") {
		t.Errorf("duplicate id: %v", err)
	}
}

// The reuse-policy rule, asked in one place by the router, the forecast
// and the client.
func TestReusePolicyRerunRule(t *testing.T) {
	open, completed, failed := Run{}, Run{Closed: true}, Run{Closed: true, Failed: true}
	for _, c := range []struct {
		p                     ReusePolicy
		may                   bool
		open, completed, fail bool
	}{
		{ReuseRejectDuplicate, false, false, false, false},
		{ReuseAllowDuplicateFailedOnly, true, false, false, true},
		{ReuseAllowDuplicate, true, false, true, true},
	} {
		if got := c.p.MayRerun(); got != c.may {
			t.Errorf("%s.MayRerun() = %v, want %v", c.p, got, c.may)
		}
		for _, r := range []struct {
			run  Run
			want bool
		}{{open, c.open}, {completed, c.completed}, {failed, c.fail}} {
			if got := c.p.RerunsAfter(r.run); got != r.want {
				t.Errorf("%s.RerunsAfter(%+v) = %v, want %v", c.p, r.run, got, r.want)
			}
		}
	}
}

func TestSignalRouteValidate(t *testing.T) {
	sig := func() Route {
		return Route{ID: "orders", Mode: ModeSignal, Match: Match{Type: "order.*"}, WorkflowType: "Order", TaskQueue: "q",
			WorkflowIDTemplate: "order-{data.order_id}"}
	}
	rs := Routes{sig(), {ID: "a", Match: Match{Type: "t"}, WorkflowType: "W", TaskQueue: "q"}}
	if err := rs.Validate(); err != nil {
		t.Fatal(err)
	}
	if r := rs[0]; r.Signal != schemas.DefaultSignalName || r.IDReusePolicy != ReuseAllowDuplicate || r.Key != KeyEventID || r.tmpl == nil {
		t.Errorf("signal route defaults: %+v", r)
	}
	if r := rs[1]; r.Mode != ModeStart || r.IDReusePolicy != ReuseRejectDuplicate {
		t.Errorf("start route defaults: %+v", r)
	}
	if rs[0].MayRerun() || !(&Route{Mode: ModeStart, IDReusePolicy: ReuseAllowDuplicate}).MayRerun() {
		t.Error("a signal route must never re-run a delivered event; an allow_duplicate start route may")
	}
	for want, mut := range map[string]func(*Route){
		"routes[0].mode":                         func(r *Route) { r.Mode = "push" },
		"routes[0].workflow_id_template: empty":  func(r *Route) { r.WorkflowIDTemplate = "" },
		"unknown placeholder {event}":            func(r *Route) { r.WorkflowIDTemplate = "o-{event}" },
		"routes[0].key":                          func(r *Route) { r.Key = KeyScheduledFor },
		"routes[0].definition":                   func(r *Route) { r.Definition = &schemas.ActivityDefinition{} },
		"routes[0].signal":                       func(r *Route) { r.Signal = "a\nb" },
		"routes[0].workflow_id_template: set on": func(r *Route) { r.Mode = "" },
		"routes[0].signal: set on a start route": func(r *Route) { r.Mode, r.WorkflowIDTemplate, r.Signal = ModeStart, "", "s" },
		"routes[0].id_reuse_policy":              func(r *Route) { r.IDReusePolicy = "never" },
	} {
		r := sig()
		mut(&r)
		err := Routes{r}.Validate()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	// A signal route's explicit policy is kept.
	r := sig()
	r.IDReusePolicy = ReuseRejectDuplicate
	if rs := (Routes{r}); rs.Validate() != nil || rs[0].IDReusePolicy != ReuseRejectDuplicate {
		t.Errorf("explicit reject_duplicate on a signal route: %+v", rs[0])
	}
}
