package ops

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/dedupio/dedup/sink/starter"
)

func TestExplainPrintsTheTemporalQueriesThatFindTheRecordsWorkflows(t *testing.T) {
	f := newFixture(t)
	f.cfg.Routes[1].Namespace = "crm-ns"
	tl := f.tool()
	r := f.produce(0, order(`it's "a"`, "1"))
	f.route(tl, r, true)
	ex, _, _ := tl.Explain(context.Background(), Query{Topic: r.Topic, Partition: &r.Partition, Offset: &r.Offset})
	byID := `DedupEventId = "it's \"a\""`
	byRecord := fmt.Sprintf(`DedupKafkaTopic = %q AND DedupKafkaPartition = 0 AND DedupKafkaOffset = %d`, topic, r.Offset)
	want := []string{
		"temporal workflow list --namespace default --query '" + strings.ReplaceAll(byID, "'", `'\''`) + "'",
		"temporal workflow list --namespace default --query '" + byRecord + "'",
		"temporal workflow list --namespace crm-ns --query '" + strings.ReplaceAll(byID, "'", `'\''`) + "'",
		"temporal workflow list --namespace crm-ns --query '" + byRecord + "'",
	}
	var got []string
	for _, q := range ex.TemporalQueries {
		got = append(got, q.Command)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("queries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var b strings.Builder
	ex.text(&b)
	if !strings.Contains(b.String(), "find       "+want[0]) {
		t.Fatalf("the text lacks the first query:\n%s", b.String())
	}

	// Without search attributes, the workflows are found by their IDs.
	tl.cfg.Temporal.SearchAttributes = starter.SearchAttributesOff
	ex, _, _ = tl.Explain(context.Background(), Query{Topic: r.Topic, Partition: &r.Partition, Offset: &r.Offset})
	got = got[:0]
	for _, q := range ex.TemporalQueries {
		got = append(got, q.Query)
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "WorkflowId = ") || !strings.HasPrefix(got[1], "WorkflowId = ") {
		t.Fatalf("queries with search_attributes off: %v, want one WorkflowId per workflow", got)
	}
}

// An event ID longer than a Keyword (sink/starter leaves it out of the
// run's DedupEventId: the default event_id.max_id_length of 256 allows
// one byte more) is not looked for by DedupEventId, which would find
// nothing: its workflows are found by their workflow IDs, and the record
// by its coordinates.
func TestExplainFindsTheWorkflowsOfAnEventIDLongerThanAKeywordByTheirIDs(t *testing.T) {
	f := newFixture(t)
	tl := f.tool()
	id := strings.Repeat("k", 256)
	if starter.KeywordFits(id) {
		t.Fatalf("an event ID of %d bytes fits a Keyword: the test needs a longer one", len(id))
	}
	r := f.produce(0, order(id, "1"))
	f.route(tl, r, true)
	ex, _, _ := tl.Explain(context.Background(), Query{Topic: r.Topic, Partition: &r.Partition, Offset: &r.Offset})
	byWorkflowID := 0
	for _, q := range ex.TemporalQueries {
		if strings.Contains(q.Query, starter.AttrEventID) {
			t.Errorf("explain prints %s, which finds no run: the run carries no %s of %d bytes", q.Query, starter.AttrEventID, len(id))
		}
		if strings.HasPrefix(q.Query, "WorkflowId = ") {
			byWorkflowID++
		}
	}
	if byWorkflowID != len(ex.Workflows) || byWorkflowID == 0 {
		t.Errorf("queries %+v: want one WorkflowId query for each of the %d workflows", ex.TemporalQueries, len(ex.Workflows))
	}
}

// Under temporal.search_attributes: auto the router sends the attributes
// only if every namespace had them all at its start-up, which explain
// cannot know: each workflow is also found by its workflow ID, a query
// that finds it either way.
func TestExplainUnderAutoFindsTheWorkflowsByTheirIDsToo(t *testing.T) {
	f := newFixture(t)
	tl := f.tool()
	tl.cfg.Temporal.SearchAttributes = starter.SearchAttributesAuto
	r := f.produce(0, order("auto-1", "1"))
	f.route(tl, r, true)
	ex, _, _ := tl.Explain(context.Background(), Query{Topic: r.Topic, Partition: &r.Partition, Offset: &r.Offset})
	found := map[string]bool{}
	for _, q := range ex.TemporalQueries {
		found[q.Query] = true
	}
	for _, wf := range ex.Workflows {
		if q := "WorkflowId = " + literal(wf.WorkflowID); !found[q] {
			t.Errorf("no %s among %+v: under auto the runs may carry no search attributes", q, ex.TemporalQueries)
		}
	}
	if len(ex.Workflows) == 0 || !found[starter.AttrEventID+` = "auto-1"`] {
		t.Errorf("queries %+v: want the event ID's as well", ex.TemporalQueries)
	}
}

// The printed command is one shell word per argument whatever the
// configuration holds: a namespace is quoted as the query is.
func TestExplainQuotesTheNamespaceOfThePrintedCommand(t *testing.T) {
	f := newFixture(t)
	f.cfg.Routes[1].Namespace = "crm ns;$(id)"
	tl := f.tool()
	r := f.produce(0, order("ns-1", "1"))
	f.route(tl, r, true)
	ex, _, _ := tl.Explain(context.Background(), Query{Topic: r.Topic, Partition: &r.Partition, Offset: &r.Offset})
	want := "temporal workflow list --namespace 'crm ns;$(id)' --query "
	var found bool
	for _, q := range ex.TemporalQueries {
		found = found || strings.HasPrefix(q.Command, want)
		if strings.Contains(q.Command, "--namespace crm") {
			t.Errorf("the namespace is not quoted: %s", q.Command)
		}
	}
	if !found {
		t.Errorf("no command starts %q: %+v", want, ex.TemporalQueries)
	}
}
