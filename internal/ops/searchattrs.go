package ops

import (
	"fmt"
	"strings"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/sink/starter"
)

// TemporalQuery is a `temporal workflow list` that finds some of the
// record's workflows in Temporal (and its UI's search box takes Query).
type TemporalQuery struct {
	Namespace string `json:"namespace"`
	Query     string `json:"query"`
	Command   string `json:"command"`
}

// temporalQueries is how an operator finds ex's workflows in Temporal:
// by the search attributes dedup records with every run it starts
// (sink/starter/searchattrs.go) when temporal.search_attributes is not
// off: the event ID (by workflow ID when it is too long to be one, and
// by workflow ID too under auto), and the record's coordinates; an entity workflow of
// a signal route (which carries DedupRoute only) and every workflow when
// the attributes are off, by its workflow ID. One query per namespace of
// the record's routes.
func temporalQueries(cfg config.Config, ex *Explanation) []TemporalQuery {
	nsOf := map[string]string{}
	for _, r := range cfg.Routes {
		nsOf[r.ID] = r.Namespace
	}
	ns := func(wf Workflow) string {
		if wf.Route != nil && nsOf[wf.Route.ID] != "" {
			return nsOf[wf.Route.ID]
		}
		return cfg.Temporal.Namespace
	}
	attrs := cfg.Temporal.SearchAttributes != starter.SearchAttributesOff
	eventID := ex.Query.EventID
	if ex.Decision != nil && ex.Decision.EventID != "" {
		eventID = ex.Decision.EventID
	}
	var out []TemporalQuery
	add := func(namespace, query string) {
		for _, q := range out {
			if q.Namespace == namespace && q.Query == query {
				return
			}
		}
		out = append(out, TemporalQuery{Namespace: namespace, Query: query,
			Command: fmt.Sprintf("temporal workflow list --namespace %s --query %s", shellWord(namespace), shellQuote(query))})
	}
	// An event ID too long for a Keyword is not on its runs
	// (starter.KeywordFits), and under auto the runs carry the attributes
	// only if every namespace had them at the router's start-up, which
	// explain cannot know: they are found by their IDs.
	byEventID := starter.KeywordFits(eventID)
	auto := cfg.Temporal.SearchAttributes == starter.SearchAttributesAuto
	for _, wf := range ex.Workflows {
		switch {
		case wf.EntityWorkflowID != "":
			add(ns(wf), "WorkflowId = "+literal(wf.EntityWorkflowID))
		case !attrs, !byEventID, auto:
			add(ns(wf), "WorkflowId = "+literal(wf.WorkflowID))
		}
	}
	if !attrs {
		return out
	}
	for _, wf := range ex.Workflows {
		if wf.EntityWorkflowID != "" {
			continue
		}
		if byEventID {
			add(ns(wf), starter.AttrEventID+" = "+literal(eventID))
		}
		if r := ex.Record; r != nil {
			add(ns(wf), fmt.Sprintf("%s = %s AND %s = %d AND %s = %d", starter.AttrKafkaTopic, literal(r.Topic),
				starter.AttrKafkaPartition, r.Partition, starter.AttrKafkaOffset, r.Offset))
		}
	}
	return out
}

// literal is s as a string literal of Temporal's list filter: in double
// quotes, with backslash escapes.
func literal(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// shellWord is s as one POSIX shell word: as it is when it holds only
// characters no shell treats specially (a namespace's usual name),
// quoted otherwise.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == "" {
		return s
	}
	return shellQuote(s)
}

// shellQuote is s as one POSIX shell word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
