package config

import "testing"

// yaml v3.0.6 resolves a plain "<<" as the merge tag wherever it is asked
// (resolve's table gained '<'), and ExpandEnv types an expanded value
// again by what it says: a ${VAR} holding "<<" must still be the string
// "<<" in a string field, not a merge nor an error.
func TestAnExpandedValueOfTwoLessThanSignsStaysAString(t *testing.T) {
	t.Setenv("ADV45_TYPE", "<<")
	cfg, err := Parse([]byte(`
kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}
postgres: {url: "postgres://127.0.0.1/d"}
routes: [{id: a, match: {type: "${ADV45_TYPE}"}, workflow_type: W, task_queue: q}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Routes[0].Match.Type; got != "<<" {
		t.Errorf("match.type from ${ADV45_TYPE}=<<: %q, want <<", got)
	}
}
