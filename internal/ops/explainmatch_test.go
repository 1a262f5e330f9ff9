package ops

import (
	"context"
	"strings"
	"testing"

	"github.com/dedupio/dedup/processor/decide"
)

// dedup explain says, for each route a decided record does not match,
// which part of the route's match it fails: its type, or the first field
// of match.fields (missing, or another value).
func TestExplainSaysWhichFieldARouteDoesNotMatch(t *testing.T) {
	f := newFixture(t)
	f.withRoute(decide.Route{ID: "paid", Match: decide.Match{Type: "order.*", Fields: map[string]string{"data.v": "paid", "data.region": "eu-*"}},
		WorkflowType: "W", TaskQueue: "q"})
	tl := f.tool()
	r := f.produce(0, `{"specversion":"1.0","id":"a","type":"order.created","source":"shop","data":{"v":"open","region":"eu-1"}}`)
	ex, _, _ := tl.Explain(context.Background(), Query{Topic: r.Topic, Partition: &r.Partition, Offset: &r.Offset})
	if ex.Decision == nil {
		t.Fatal("the record was not decided")
	}
	want := `paid: data.v is "open", not "paid"`
	var got []string
	for _, m := range ex.Decision.NotMatched {
		got = append(got, m.Route+": "+m.Why)
	}
	if strings.Join(got, "; ") != want {
		t.Errorf("not matched: %q, want %q", got, want)
	}
	var b strings.Builder
	ex.text(&b)
	if !strings.Contains(b.String(), "not matched route "+want) {
		t.Errorf("the text does not say why route paid did not match:\n%s", b.String())
	}
}
