package eventid

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
)

func mustDecoder(t testing.TB, mod func(*Config)) *Decoder {
	t.Helper()
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	d, err := NewDecoder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func rec(value string, headers ...string) Record {
	r := Record{Topic: "events", Partition: 3, Offset: 42, Key: []byte("k1"), Value: []byte(value)}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Headers = append(r.Headers, Header{Key: headers[i], Value: []byte(headers[i+1])})
	}
	return r
}

func TestDecodeIDChain(t *testing.T) {
	contentOf := func(r Record) string {
		ev, err := mustDecoder(t, func(c *Config) { c.Chain = []Rule{RuleContent} }).Decode(r)
		if err != nil {
			t.Fatal(err)
		}
		return ev.ID
	}
	plainNoID := rec(`{"type":"order.created","source":"shop","total":12.5}`)
	cases := []struct {
		name     string
		mod      func(*Config)
		r        Record
		wantID   string
		wantRule Rule
		wantType string
		wantData string
		reason   Reason
	}{
		{name: "structured cloudevent id", r: rec(`{"specversion":"1.0","id":"evt_abc123","type":"order.created","source":"shop","time":"2026-03-01T09:00:00Z","data":{"b":1, "a":2}}`),
			wantID: "evt_abc123", wantRule: RuleField, wantType: "order.created", wantData: `{"b":1,"a":2}`},
		{name: "binary cloudevent ce_id header", r: rec(`{"a": 1}`, "ce_specversion", "1.0", "ce_id", "evt_bin", "ce_type", "user.signed_up", "ce_source", "auth"),
			wantID: "evt_bin", wantRule: RuleHeader, wantType: "user.signed_up", wantData: `{"a":1}`},
		{name: "header wins over field", r: rec(`{"id":"from-field","type":"t"}`, "idempotency-key", "from-header"),
			wantID: "from-header", wantRule: RuleHeader, wantType: "t"},
		{name: "plain id field", r: rec(`{"id":"p1","type":"t","x":[1,2]}`),
			wantID: "p1", wantRule: RuleField, wantType: "t", wantData: `{"id":"p1","type":"t","x":[1,2]}`},
		{name: "plain numeric id keeps its text", r: rec(`{"id":1234,"type":"t"}`), wantID: "1234", wantRule: RuleField, wantType: "t"},
		{name: "plain null id falls through to content", r: rec(`{"id":null,"type":"t"}`), wantRule: RuleContent, wantType: "t",
			wantID: contentOf(rec(`{"id":null,"type":"t"}`))},
		{name: "nested fields", mod: func(c *Config) {
			c.Format = FormatPlain
			c.Fields = Fields{ID: "meta.event_id", Type: "meta.kind", Data: "body"}
		}, r: rec(`{"meta":{"event_id":"n1","kind":"k"},"body":{"v":true}}`), wantID: "n1", wantRule: RuleField, wantType: "k", wantData: `{"v":true}`},
		{name: "no id derives from content", r: plainNoID, wantID: contentOf(plainNoID), wantRule: RuleContent, wantType: "order.created"},
		{name: "coordinates", mod: func(c *Config) { c.Chain = []Rule{RuleField, RuleCoordinates} }, r: plainNoID,
			wantID: "events/3/42", wantRule: RuleCoordinates, wantType: "order.created"},
		{name: "replayed record keeps its first coordinates", mod: func(c *Config) { c.Chain = []Rule{RuleCoordinates} },
			r:      rec(`{"type":"t"}`, "dedup-origin-topic", "events", "dedup-origin-partition", "5", "dedup-origin-offset", "77"),
			wantID: "events/5/77", wantRule: RuleCoordinates, wantType: "t"},
		{name: "empty id field is an error, not a fall-through", r: rec(`{"id":"","type":"t"}`), reason: ReasonInvalidID},
		{name: "object id", r: rec(`{"id":{"x":1},"type":"t"}`), reason: ReasonInvalidID},
		{name: "id too long", r: rec(`{"id":"` + strings.Repeat("x", 300) + `","type":"t"}`), reason: ReasonInvalidID},
		{name: "control character in header id", r: rec(`{"type":"t"}`, "idempotency-key", "a\nb"), reason: ReasonInvalidID},
		{name: "no id without derivation", mod: func(c *Config) { c.Chain = []Rule{RuleHeader, RuleField} }, r: plainNoID, reason: ReasonNoID},
		{name: "missing type", r: rec(`{"id":"x"}`), reason: ReasonMissingType},
		{name: "type not a string", r: rec(`{"id":"x","type":7}`), reason: ReasonMissingType},
		{name: "binary without ce_type", r: rec(`{}`, "ce_specversion", "1.0", "ce_id", "x"), reason: ReasonMissingType},
		{name: "binary with non-JSON value and no content type is bytes", r: rec(`garbage`, "ce_specversion", "1.0", "ce_id", "x", "ce_type", "t"),
			wantID: "x", wantRule: RuleHeader, wantType: "t", wantData: `null`},
		{name: "binary declared JSON but not JSON", r: rec(`garbage`, "ce_specversion", "1.0", "ce_id", "x", "ce_type", "t", "content-type", "application/json"), reason: ReasonUndecodable},
		{name: "garbage", r: rec("\x00\x01garbage"), reason: ReasonUndecodable},
		{name: "array value", r: rec(`[1,2]`), reason: ReasonUndecodable},
		{name: "cloudevents format rejects plain", mod: func(c *Config) { c.Format = FormatCloudEvents }, r: rec(`{"id":"x","type":"t"}`), reason: ReasonUndecodable},
		{name: "path through a scalar", mod: func(c *Config) { c.Fields.Type = "meta.kind" }, r: rec(`{"meta":3}`), reason: ReasonUndecodable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := mustDecoder(t, tc.mod).Decode(tc.r)
			if tc.reason != "" {
				if got := ReasonOf(err); got != tc.reason {
					t.Fatalf("reason = %q (err %v), want %q", got, err, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev.ID != tc.wantID || ev.Rule != tc.wantRule || ev.Type != tc.wantType {
				t.Fatalf("got id=%q rule=%q type=%q, want id=%q rule=%q type=%q", ev.ID, ev.Rule, ev.Type, tc.wantID, tc.wantRule, tc.wantType)
			}
			if tc.wantData != "" && compacted(ev.Data) != tc.wantData {
				t.Fatalf("data = %s, want %s", ev.Data, tc.wantData)
			}
		})
	}
}

func TestContentIDIgnoresKeyOrderAndWhitespaceButNotKeyOrPayload(t *testing.T) {
	d := mustDecoder(t, nil)
	a := rec(`{"type":"order.created","source":"shop","total":12.5,"items":[{"sku":"a","n":1}]}`)
	b := rec(" {\n \"items\" : [ {\"n\":1.0, \"sku\":\"a\"} ],\"total\":1.25e1, \"source\":\"shop\",\"type\":\"order.created\"}")
	b.Offset, b.Partition = 9000, 7 // re-produced elsewhere
	evA, errA := d.Decode(a)
	evB, errB := d.Decode(b)
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if evA.ID != evB.ID || evA.PayloadHash != evB.PayloadHash {
		t.Fatalf("same content, different identity: %s vs %s", evA.ID, evB.ID)
	}
	if evA.Rule != RuleContent || !strings.HasPrefix(evA.ID, "sha256-") || len(evA.ID) != len("sha256-")+64 {
		t.Fatalf("unexpected derived id %q (%s)", evA.ID, evA.Rule)
	}
	otherKey := a
	otherKey.Key = []byte("k2")
	if ev, _ := d.Decode(otherKey); ev.ID == evA.ID {
		t.Fatal("record key is not part of the content ID")
	}
	if ev, _ := d.Decode(rec(`{"type":"order.created","source":"shop","total":12.6,"items":[{"sku":"a","n":1}]}`)); ev.ID == evA.ID || ev.PayloadHash == evA.PayloadHash {
		t.Fatal("payload change kept the same ID or hash")
	}
}

func TestPayloadHashSeparatesSameIDDifferentPayload(t *testing.T) {
	d := mustDecoder(t, nil)
	a, _ := d.Decode(rec(`{"id":"e1","type":"t","v":1}`))
	b, _ := d.Decode(rec(`{"v":1,  "type":"t","id":"e1"}`))
	c, _ := d.Decode(rec(`{"id":"e1","type":"t","v":2}`))
	if a.ID != "e1" || a.ID != c.ID {
		t.Fatalf("ids: %q %q", a.ID, c.ID)
	}
	if a.PayloadHash != b.PayloadHash {
		t.Fatal("reformatted payload changed the hash")
	}
	if a.PayloadHash == c.PayloadHash {
		t.Fatal("different payloads share a hash")
	}
}

func TestConfigValidate(t *testing.T) {
	cases := map[string]func(*Config){
		"event_id.format":        func(c *Config) { c.Format = "xml" },
		"event_id.chain: empty":  func(c *Config) { c.Chain = nil },
		"unknown rule":           func(c *Config) { c.Chain = []Rule{"random"} },
		"repeated":               func(c *Config) { c.Chain = []Rule{RuleContent, RuleContent} },
		"event_id.headers":       func(c *Config) { c.Headers = nil },
		"event_id.max_id_length": func(c *Config) { c.MaxIDLength = 0 },
		"event_id.fields.type":   func(c *Config) { c.Fields.Type = "" },
	}
	for want, mod := range cases {
		cfg := DefaultConfig()
		mod(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

// The assembled canonical form equals RFC 8785 applied to the whole
// object (as the first version computed it), for awkward strings too.
func TestCanonicalMatchesWholeObjectJCS(t *testing.T) {
	reference := func(data json.RawMessage, source, typ string, key []byte) []byte {
		doc := struct {
			Data   json.RawMessage `json:"data"`
			Key    *string         `json:"key,omitempty"`
			Source string          `json:"source"`
			Type   string          `json:"type"`
		}{Data: data, Source: source, Type: typ}
		if key != nil {
			k := base64.StdEncoding.EncodeToString(key)
			doc.Key = &k
		}
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		out, err := jcs.Transform(b)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	cases := []struct {
		data        string
		source, typ string
		key         []byte
	}{
		{`{"b":1,"a":[1.0,2e3,"x"]}`, "shop", "order.created", []byte("k1")},
		{`null`, "", "t", nil},
		{`"str"`, "q\"uo\\te", "tab\there\nnl\u0001ctl", []byte{}},
		{`{"é":"ü","€":1e-7}`, "sourcé <&>", "type/ü", []byte{0, 255, 7}},
	}
	for _, c := range cases {
		cd, err := jcs.Transform([]byte(c.data))
		if err != nil {
			t.Fatal(err)
		}
		got := assemble(cd, c.source, c.typ, c.key)
		if want := reference(json.RawMessage(c.data), c.source, c.typ, c.key); string(got) != string(want) {
			t.Errorf("%+v:\n got %s\nwant %s", c, got, want)
		}
	}
}

// TestDecodeProvenance: every event says which envelope it was read as and
// where its ID came from (what dedup explain prints).
func TestDecodeProvenance(t *testing.T) {
	cases := []struct {
		name     string
		mod      func(*Config)
		r        Record
		envelope Envelope
		rule     Rule
		from     string
	}{
		{"structured id", nil, rec(`{"specversion":"1.0","id":"e1","type":"t","source":"s"}`), EnvelopeStructured, RuleField, "id"},
		{"binary ce_id", nil, rec(`{}`, "ce_specversion", "1.0", "ce_id", "e2", "ce_type", "t"), EnvelopeBinary, RuleHeader, "ce_id"},
		{"plain idempotency-key", nil, rec(`{"type":"t"}`, "idempotency-key", "k"), EnvelopePlain, RuleHeader, "idempotency-key"},
		{"plain nested field", func(c *Config) {
			c.Format = FormatPlain
			c.Fields = Fields{ID: "meta.id", Type: "meta.kind"}
		}, rec(`{"meta":{"id":"n1","kind":"k"}}`), EnvelopePlain, RuleField, "meta.id"},
		{"content", nil, rec(`{"type":"t"}`), EnvelopePlain, RuleContent, ""},
		{"coordinates", func(c *Config) { c.Chain = []Rule{RuleCoordinates} }, rec(`{"type":"t"}`), EnvelopePlain, RuleCoordinates, ""},
		{"coordinates of a replayed record", func(c *Config) { c.Chain = []Rule{RuleCoordinates} },
			rec(`{"type":"t"}`, "dedup-origin-topic", "events", "dedup-origin-partition", "5", "dedup-origin-offset", "77"),
			EnvelopePlain, RuleCoordinates, OriginHeaders},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev, err := mustDecoder(t, c.mod).Decode(c.r)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Envelope != c.envelope || ev.Rule != c.rule || ev.IDFrom != c.from {
				t.Fatalf("envelope %q rule %q from %q, want %q %q %q", ev.Envelope, ev.Rule, ev.IDFrom, c.envelope, c.rule, c.from)
			}
		})
	}
}

// compacted is data as a workflow input carries it: encoding/json
// compacts a RawMessage.
func compacted(data json.RawMessage) string {
	b, err := json.Marshal(data)
	if err != nil {
		return "invalid: " + err.Error()
	}
	return string(b)
}

// TestWholeValueDataWithNonJSONSpaceAroundItIsUndecodable: a plain record
// whose data is the whole value is canonicalised as it was written, so
// white space that JSON does not allow around it (\v, \f, U+0085, U+00A0,
// which the object scan trims) leaves it undecodable, whichever pass
// (one or two) writes the canonical data: an event that was refused must
// not start being accepted, nor the other way round.
func TestWholeValueDataWithNonJSONSpaceAroundItIsUndecodable(t *testing.T) {
	d := mustDecoder(t, nil)
	for _, v := range []string{
		`{"type":"t","id":"i"}` + "\v",
		`{"type":"t","id":"i"}` + "\f",
		"\f" + `{"type":"t","id":"i"}`,
		`{"type":"t","id":"i"}` + "\u00a0",
		"\u0085" + `{"type":"t","id":"i"}`,
		"\v" + `{"type":"t","data":{"b":1,"a":2}}` + " \f",
	} {
		ev, err := d.Decode(rec(v))
		if ReasonOf(err) != ReasonUndecodable || !strings.Contains(err.Error(), "canonicalising data:") {
			t.Errorf("%q: got %+v, %v; want undecodable: canonicalising data", v, ev, err)
		}
	}
	// With the data a member, the value around the object is not hashed:
	// the same bytes decode.
	dd := mustDecoder(t, func(c *Config) { c.Fields.Data = "data" })
	for _, v := range []string{`{"type":"t","id":"i","data":{"b":1}}` + "\v", "\u00a0" + `{"type":"t","id":"i","data":[1.0]}`} {
		if _, err := dd.Decode(rec(v)); err != nil {
			t.Errorf("%q with data a member: %v", v, err)
		}
	}
}
