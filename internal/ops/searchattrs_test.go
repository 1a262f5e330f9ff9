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
