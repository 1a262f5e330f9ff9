package starter

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/converter"
	"go.yaml.in/yaml/v3"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

// decoded is attrs decoded back with the SDK's default converter, each by
// the Go type of its declared type (Keyword: string, Int: int64,
// Datetime: time.Time).
func decodedAttrs(t *testing.T, req decide.StartRequest) map[string]any {
	t.Helper()
	sa, err := EncodeSearchAttributes(req)
	if err != nil {
		t.Fatal(err)
	}
	dc := converter.GetDefaultDataConverter()
	out := map[string]any{}
	for name, p := range sa.GetIndexedFields() {
		typ := string(p.GetMetadata()["type"])
		if want := typeOf(name).String(); typ != want {
			t.Errorf("%s: type metadata %q, want %q", name, typ, want)
		}
		var err error
		switch typ {
		case "Keyword":
			var s string
			err, out[name] = dc.FromPayload(p, &s), s
		case "Int":
			var n int64
			err, out[name] = dc.FromPayload(p, &n), n
		case "Datetime":
			var tm time.Time
			err, out[name] = dc.FromPayload(p, &tm), tm
		default:
			t.Fatalf("%s: unexpected type %q", name, typ)
		}
		if err != nil {
			t.Fatalf("decoding %s: %v", name, err)
		}
	}
	return out
}

func TestSearchAttributesOfAStartDecodeWithTheSDKsConverter(t *testing.T) {
	req := decide.StartRequest{WorkflowID: "activity-welcome:e-1",
		Input:  schemas.WorkflowInput{EventID: "e-1", ActivityID: "welcome", IDRule: "header"},
		Record: &decide.RecordRef{Topic: "orders", Partition: 7, Offset: 1 << 40}}
	got := decodedAttrs(t, req)
	want := map[string]any{AttrEventID: "e-1", AttrRoute: "welcome", AttrIDRule: "header",
		AttrKafkaTopic: "orders", AttrKafkaPartition: int64(7), AttrKafkaOffset: int64(1 << 40)}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("attributes %v, want %v", got, want)
	}
}

func TestSearchAttributesOfAScheduledFireCarryItsSlotAndNoRecord(t *testing.T) {
	req := decide.StartRequest{WorkflowID: "activity-report:2026-03-01T09:00:00+00:00",
		Input: schemas.WorkflowInput{EventID: "schedule/daily/2026-03-01T09:00:00+00:00", ActivityID: "report", IDRule: "schedule",
			TriggerKind: schemas.TriggerCron, ScheduledFor: "2026-03-01T09:00:00+00:00"}}
	got := decodedAttrs(t, req)
	if got[AttrIDRule] != "schedule" || got[AttrRoute] != "report" {
		t.Fatalf("attributes %v, want rule schedule and route report", got)
	}
	if tm, _ := got[AttrScheduledFor].(time.Time); !tm.Equal(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)) {
		t.Fatalf("%s = %v, want 2026-03-01T09:00:00Z", AttrScheduledFor, got[AttrScheduledFor])
	}
	for _, k := range []string{AttrKafkaTopic, AttrKafkaPartition, AttrKafkaOffset} {
		if _, ok := got[k]; ok {
			t.Errorf("a fire has no record, but carries %s", k)
		}
	}
}

func TestSearchAttributesOfASignalWithStartNameOnlyTheRoute(t *testing.T) {
	req := decide.StartRequest{WorkflowID: "signal-orders:e-1",
		Signal: &decide.SignalRequest{WorkflowID: "order-42", Name: "event",
			Input: schemas.SignalEvent{EventID: "e-1", ActivityID: "orders", IDRule: "header"}},
		Record: &decide.RecordRef{Topic: "orders", Partition: 0, Offset: 3}}
	got := decodedAttrs(t, req)
	if len(got) != 1 || got[AttrRoute] != "orders" {
		t.Fatalf("attributes %v, want only %s=orders", got, AttrRoute)
	}
}

func TestSearchAttributesLeaveOutAnEventIDLongerThanAKeyword(t *testing.T) {
	long := strings.Repeat("x", maxKeywordBytes+1)
	got := decodedAttrs(t, decide.StartRequest{WorkflowID: "w", Input: schemas.WorkflowInput{EventID: long, ActivityID: "r", IDRule: "field"}})
	if _, ok := got[AttrEventID]; ok {
		t.Fatalf("an event ID of %d bytes was sent as %s", len(long), AttrEventID)
	}
	if got[AttrRoute] != "r" {
		t.Fatalf("attributes %v, want the route still", got)
	}
}

// Elasticsearch visibility refuses a start whose Datetime attribute lies
// outside [1970-01-01, 2262-04-11] (InvalidArgument "Visibility store
// validation errors: [invalid search attribute date: ...]": go.temporal.io/server
// v1.32.1, common/persistence/visibility/store/elasticsearch, validateDatetime).
// A route keyed by scheduled_for takes the slot from the record, so a
// backfilled slot of 1969 would dead-letter a record that starts fine
// without the attribute: the slot is left out, as a long event ID is, and
// the workflow ID still holds it.
func TestSearchAttributesLeaveOutASlotOutsideWhatVisibilityIndexes(t *testing.T) {
	for _, c := range []struct {
		slot string
		sent bool
	}{
		{"1969-12-31T23:59:59+00:00", false},
		{"0001-01-01T00:00:00+00:00", false},
		{"1970-01-01T00:00:00+00:00", true},
		{"2262-04-11T23:47:16+00:00", true},
		{"2262-04-11T23:47:17+00:00", false},
		{"9999-12-31T23:59:59+00:00", false},
	} {
		got := decodedAttrs(t, decide.StartRequest{WorkflowID: "activity-report:" + c.slot,
			Input: schemas.WorkflowInput{EventID: "e-1", ActivityID: "report", IDRule: "header",
				TriggerKind: schemas.TriggerCron, ScheduledFor: c.slot}})
		if _, ok := got[AttrScheduledFor]; ok != c.sent {
			t.Errorf("slot %s: %s sent = %v, want %v", c.slot, AttrScheduledFor, ok, c.sent)
		}
		if got[AttrEventID] != "e-1" {
			t.Errorf("slot %s: attributes %v, want the event ID still", c.slot, got)
		}
	}
}

func TestSearchAttributesOffSendsNone(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SearchAttributes = SearchAttributesOff
	tc := New(nil, cfg)
	sa, err := tc.searchAttributes(decide.StartRequest{WorkflowID: "w", Input: schemas.WorkflowInput{EventID: "e", ActivityID: "r"}})
	if err != nil || sa != nil {
		t.Fatalf("search_attributes: off sent %v (err %v), want none", sa, err)
	}
}

func TestSearchAttributesSettingTakesModesAndBools(t *testing.T) {
	for in, want := range map[string]SearchAttributesMode{"on": SearchAttributesOn, "off": SearchAttributesOff,
		"auto": SearchAttributesAuto, "true": SearchAttributesOn, "false": SearchAttributesOff} {
		var c struct {
			M SearchAttributesMode `yaml:"m"`
		}
		if err := yaml.Unmarshal([]byte("m: "+in), &c); err != nil || c.M != want {
			t.Errorf("%s: got %q (err %v), want %q", in, c.M, err, want)
		}
	}
	cfg := DefaultConfig()
	if cfg.SearchAttributes != SearchAttributesOn {
		t.Fatalf("default %q, want on", cfg.SearchAttributes)
	}
	cfg.SearchAttributes = "sometimes"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "temporal.search_attributes") {
		t.Fatalf("Validate of search_attributes: sometimes = %v, want an error naming temporal.search_attributes", err)
	}
}

func TestUndefinedSearchAttributeWaitsForTheNamespace(t *testing.T) {
	err := fmt.Errorf("starting workflow w: %w", wire(serviceerror.NewInvalidArgument("search attribute DedupEventId is not defined")))
	if IsPermanent(err) {
		t.Fatalf("%v is permanent: every record would be dead-lettered until the attribute is created", err)
	}
	if !IsPermanent(wire(serviceerror.NewInvalidArgument("WorkflowType is not set on request."))) {
		t.Fatal("another InvalidArgument is no longer permanent")
	}
}

// The server's refusal of an attribute the namespace defines with
// another type (integration: TestSearchAttributeOfAnotherTypeWaitsForTheNamespace).
func TestSearchAttributeOfAnotherTypeWaitsForTheNamespace(t *testing.T) {
	err := fmt.Errorf("starting workflow w: %w", wire(serviceerror.NewInvalidArgument("invalid value for search attribute DedupKafkaOffset of type Keyword: 7")))
	if IsPermanent(err) {
		t.Fatalf("%v is permanent: every record would be dead-lettered until the namespace is fixed", err)
	}
}

// A server whose visibility store maps custom attributes per namespace
// (SQL visibility: PostgreSQL, MySQL, SQLite) refuses an attribute the
// namespace has no mapping for with its own words; an attribute just
// added reaches the frontend's namespace cache within its refresh
// interval (integration/devstack:
// TestNamespaceRegisteredWhileRunningStartsWithoutPermanentRefusal).
func TestUnmappedSearchAttributeWaitsForTheNamespace(t *testing.T) {
	err := fmt.Errorf("starting workflow w: %w", wire(serviceerror.NewInvalidArgument("Namespace late has no mapping defined for search attribute DedupKafkaPartition")))
	if IsPermanent(err) {
		t.Fatalf("%v is permanent: every record would be dead-lettered until the namespace's cache has the attribute", err)
	}
	// The validator names a refused value by its attribute's alias,
	// mapped again from the field: an attribute removed between the
	// start's mapping and its validation is named by its field (dedup
	// sends only its own attributes, so the field is one of them).
	if err := wire(serviceerror.NewInvalidArgument("Namespace late has no mapping defined for field name Keyword03")); IsPermanent(err) {
		t.Fatalf("%v is permanent: an attribute removed while a start was validated would dead-letter the record", err)
	}
	if !IsPermanent(wire(serviceerror.NewInvalidArgument("Namespace late has no mapping defined for search attribute CustomerId"))) {
		t.Fatal("an attribute that is not dedup's is no longer permanent")
	}
}

// What waits is what refuses every record until an operator acts. A
// refusal of one record's value (a namespace's per-value size limit
// under a long event ID, Elasticsearch's date range) leaves the other
// records starting: it is dead-lettered with the server's reason, to be
// replayed once the limit is raised, and never holds the partition.
func TestSearchAttributeRefusalOfOneRecordsValueIsDeadLettered(t *testing.T) {
	for _, msg := range []string{
		"search attribute DedupEventId value size 300 exceeds size limit 200",
		"Visibility store validation errors: [invalid search attribute date: 1969-12-31 23:59:59 +0000 UTC, supported range: [1970-01-01 00:00:00 +0000 UTC, 2262-04-11 23:47:16.854775807 +0000 UTC]]",
	} {
		if err := wire(serviceerror.NewInvalidArgument(msg)); !IsPermanent(err) {
			t.Errorf("%q waits: one record's refusal would hold its partition", msg)
		}
	}
}

func TestMissingSearchAttributesErrorNamesEachAndTheCommand(t *testing.T) {
	e := &MissingSearchAttributesError{Namespace: "prod", Missing: SearchAttributes()[4:6]}
	msg := e.Error()
	for _, s := range []string{"DedupKafkaPartition (Int)", "DedupKafkaOffset (Int)",
		"temporal operator search-attribute create --namespace prod --name DedupKafkaPartition --type Int --name DedupKafkaOffset --type Int",
		"temporal.search_attributes: off"} {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q lacks %q", msg, s)
		}
	}
	if !errors.As(error(e), new(*MissingSearchAttributesError)) {
		t.Fatal("not a *MissingSearchAttributesError")
	}
}

func BenchmarkEncodeSearchAttributes(b *testing.B) {
	req := decide.StartRequest{WorkflowID: "activity-welcome:e-1",
		Input:  schemas.WorkflowInput{EventID: "0190d7a4-6b1e-7c3a-9f00-0123456789ab", ActivityID: "welcome", IDRule: "header"},
		Record: &decide.RecordRef{Topic: "orders", Partition: 7, Offset: 123456789}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeSearchAttributes(req); err != nil {
			b.Fatal(err)
		}
	}
}

// typeOf and SearchAttributes are one contract spelled twice (a switch
// for the hot path, a list for the checks): they agree.
func TestSearchAttributeTypesAgree(t *testing.T) {
	for _, a := range SearchAttributes() {
		if typeOf(a.Name) != a.Type {
			t.Errorf("%s: typeOf %s, the list %s", a.Name, typeOf(a.Name), a.Type)
		}
	}
}

// The JSON converter EncodeSearchAttributes calls is the one the SDK's
// default data converter ends at for these values: the same payloads.
func TestSearchAttributesAreTheDefaultConvertersPayloads(t *testing.T) {
	req := decide.StartRequest{WorkflowID: "w", Input: schemas.WorkflowInput{EventID: "e", ActivityID: "r", IDRule: "header",
		ScheduledFor: "2026-03-01T09:00:00+00:00"}, Record: &decide.RecordRef{Topic: "t", Partition: 1, Offset: 2}}
	sa, err := EncodeSearchAttributes(req)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{AttrEventID: "e", AttrRoute: "r", AttrIDRule: "header", AttrKafkaTopic: "t",
		AttrKafkaPartition: int64(1), AttrKafkaOffset: int64(2), AttrScheduledFor: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
	for name, v := range vals {
		want, err := converter.GetDefaultDataConverter().ToPayload(v)
		if err != nil {
			t.Fatal(err)
		}
		got := sa.GetIndexedFields()[name]
		if got == nil || string(got.Data) != string(want.Data) ||
			string(got.Metadata[converter.MetadataEncoding]) != string(want.Metadata[converter.MetadataEncoding]) {
			t.Errorf("%s: %v, want the default converter's %v", name, got, want)
		}
	}
}
