package config

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dedupio/dedup/processor/eventid"
)

// A route's match.fields in the config file: a number or boolean written
// bare is the pattern of its literal text, and a null or an empty pattern
// is refused naming routes[i].match.fields.
func TestConfigReadsRouteFieldPatternsAsText(t *testing.T) {
	base := `
kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}
postgres: {url: "postgres://u@h/d?sslmode=verify-full"}
routes:
  - id: a
    workflow_type: W
    task_queue: q
    match:
      type: "order.*"
      fields: {data.order.status: paid, data.region: "eu-*", data.amount: 4.50, data.gift: true}
`
	cfg, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	rs := cfg.Kafka.Routes
	for _, c := range []struct {
		data  string
		match bool
	}{
		{`{"order":{"status":"paid"},"region":"eu-1","amount":4.50,"gift":true}`, true},
		{`{"order":{"status":"paid"},"region":"eu-1","amount":4.5,"gift":true}`, false},
		{`{"order":{"status":"paid"},"region":"eu-1","amount":4.50,"gift":"yes"}`, false},
	} {
		ev := eventid.Event{Type: "order.paid", Data: json.RawMessage(c.data)}
		if got := len(rs.Match(&ev)) == 1; got != c.match {
			t.Errorf("%s: matches %v, want %v (fields %v)", c.data, got, c.match, rs[0].Match.Fields)
		}
	}
	for doc, want := range map[string]string{
		strings.Replace(base, "data.gift: true", "data.gift: null", 1): `routes[0].match.fields["data.gift"]: empty pattern`,
		strings.Replace(base, "data.gift: true", "gift: x", 1):         `routes[0].match.fields["gift"]`,
		strings.Replace(base, "fields:", "feilds:", 1):                 "field feilds not found",
	} {
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", want, err, want)
		}
	}
}
