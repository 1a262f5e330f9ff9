package starter

// Search attributes: what dedup records with every run it starts, so that
// an operator finds the run of a Kafka record (or a record's runs) with
// `temporal workflow list --query` and in the Temporal UI. The names and
// types below are a contract with operators (saved queries, dashboards):
// a name or type never changes; an attribute may be added.
//
//	DedupEventId         Keyword   the event ID (header, field, content, coordinates, or schedule/{trigger}/{slot})
//	DedupRoute           Keyword   the route (routes[].id: the activity ID), or the trigger's activity
//	DedupIdRule          Keyword   how the event ID was obtained: header, field, content, coordinates, schedule
//	DedupKafkaTopic      Keyword   the Kafka record that started the run: its topic,
//	DedupKafkaPartition  Int       partition
//	DedupKafkaOffset     Int       and offset (absent for a scheduler's fire)
//	DedupScheduledFor    Datetime  the slot of a scheduled run (a fire, or a route keyed by scheduled_for)
//
// A signal route's SignalWithStart starts an entity workflow that many
// events signal: it carries DedupRoute only. The event that happened to
// start the run is not the entity's identity, and a query on DedupEventId
// that found the entity for its first event and not for the others would
// mislead; a delivery is found by its entity's workflow ID (dedup explain
// prints it).
//
// Temporal applies search attributes when it creates a run: a start that
// finds the run already started changes nothing.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.yaml.in/yaml/v3"

	"github.com/dedupio/dedup/processor/decide"
)

// The search attributes' names (see above).
const (
	AttrEventID        = "DedupEventId"
	AttrRoute          = "DedupRoute"
	AttrIDRule         = "DedupIdRule"
	AttrKafkaTopic     = "DedupKafkaTopic"
	AttrKafkaPartition = "DedupKafkaPartition"
	AttrKafkaOffset    = "DedupKafkaOffset"
	AttrScheduledFor   = "DedupScheduledFor"
)

// maxKeywordBytes is the longest Keyword value dedup sends: SQL
// visibility stores a Keyword in a VARCHAR(255). A longer event ID (over
// event_id.max_id_length's default of 256, up to 900) is left out; the
// workflow ID still holds it.
const maxKeywordBytes = 255

// KeywordFits reports whether v is sent as a Keyword attribute: not
// empty, and no longer than maxKeywordBytes. An event ID that does not
// fit is not on its run, so nothing finds the run by it.
func KeywordFits(v string) bool { return v != "" && len(v) <= maxKeywordBytes }

// SearchAttribute is one attribute of the contract: its name and type.
type SearchAttribute struct {
	Name string
	Type enumspb.IndexedValueType
}

// SearchAttributes is the contract's list, in a fixed order.
func SearchAttributes() []SearchAttribute {
	kw, num := enumspb.INDEXED_VALUE_TYPE_KEYWORD, enumspb.INDEXED_VALUE_TYPE_INT
	return []SearchAttribute{
		{AttrEventID, kw}, {AttrRoute, kw}, {AttrIDRule, kw}, {AttrKafkaTopic, kw},
		{AttrKafkaPartition, num}, {AttrKafkaOffset, num},
		{AttrScheduledFor, enumspb.INDEXED_VALUE_TYPE_DATETIME},
	}
}

// SearchAttributesMode is temporal.search_attributes: on (the default:
// every run carries them, and start-up stops if a namespace lacks one),
// off (none are sent, nothing is checked), auto (sent when every namespace
// has them all, else none, with a warning). A YAML bool is on or off.
type SearchAttributesMode string

// The modes of temporal.search_attributes.
const (
	SearchAttributesOn   SearchAttributesMode = "on"
	SearchAttributesOff  SearchAttributesMode = "off"
	SearchAttributesAuto SearchAttributesMode = "auto"
)

// UnmarshalYAML takes on, off, auto, or a bool.
func (m *SearchAttributesMode) UnmarshalYAML(n *yaml.Node) error {
	var b bool
	if n.Tag == "!!bool" && n.Decode(&b) == nil {
		*m = SearchAttributesOff
		if b {
			*m = SearchAttributesOn
		}
		return nil
	}
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("temporal.search_attributes: want on, off, auto or a bool: %w", err)
	}
	*m = SearchAttributesMode(s)
	return nil
}

// validate names the field when m is not a mode.
func (m SearchAttributesMode) validate() error {
	switch m {
	case SearchAttributesOn, SearchAttributesOff, SearchAttributesAuto:
		return nil
	}
	return fmt.Errorf("temporal.search_attributes: %q, want on, off or auto (or true/false)", string(m))
}

// MissingSearchAttributesError is a namespace that lacks some of dedup's
// search attributes (or has one of another type).
type MissingSearchAttributesError struct {
	Namespace string
	Missing   []SearchAttribute
	// WrongType names the attributes that exist with another type, and it.
	WrongType map[string]enumspb.IndexedValueType
}

func (e *MissingSearchAttributesError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "temporal.search_attributes: namespace %q lacks dedup's search attributes", e.Namespace)
	for _, a := range e.Missing {
		fmt.Fprintf(&b, " %s (%s)", a.Name, a.Type)
	}
	if len(e.Missing) > 0 {
		fmt.Fprintf(&b, "; create them: temporal operator search-attribute create --namespace %s", e.Namespace)
		for _, a := range e.Missing {
			fmt.Fprintf(&b, " --name %s --type %s", a.Name, a.Type)
		}
		b.WriteString(" (Temporal Cloud: tcld namespace search-attributes add --namespace " + e.Namespace)
		for _, a := range e.Missing {
			fmt.Fprintf(&b, " --search-attribute %s=%s", a.Name, a.Type)
		}
		b.WriteString(")")
	}
	names := make([]string, 0, len(e.WrongType))
	for n := range e.WrongType {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "; %s exists with type %s, dedup needs %s (remove it, or rename it)", n, e.WrongType[n], typeOf(n))
	}
	b.WriteString("; or run without them: temporal.search_attributes: off")
	return b.String()
}

// typeOf is the contract's type of the attribute name.
func typeOf(name string) enumspb.IndexedValueType {
	switch name {
	case AttrEventID, AttrRoute, AttrIDRule, AttrKafkaTopic:
		return enumspb.INDEXED_VALUE_TYPE_KEYWORD
	case AttrKafkaPartition, AttrKafkaOffset:
		return enumspb.INDEXED_VALUE_TYPE_INT
	case AttrScheduledFor:
		return enumspb.INDEXED_VALUE_TYPE_DATETIME
	}
	return enumspb.INDEXED_VALUE_TYPE_UNSPECIFIED
}

// CheckSearchAttributes asks Temporal for each namespace's search
// attributes (OperatorService.ListSearchAttributes) and returns a
// *MissingSearchAttributesError for the first namespace that lacks one of
// dedup's, or has it with another type. Other errors are the call's.
func CheckSearchAttributes(ctx context.Context, ops operatorservice.OperatorServiceClient, namespaces []string) error {
	for _, ns := range namespaces {
		resp, err := ops.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
		if err != nil {
			return fmt.Errorf("listing the search attributes of namespace %s: %w", ns, err)
		}
		have := resp.GetCustomAttributes()
		e := &MissingSearchAttributesError{Namespace: ns, WrongType: map[string]enumspb.IndexedValueType{}}
		for _, a := range SearchAttributes() {
			t, ok := have[a.Name]
			switch {
			case !ok:
				e.Missing = append(e.Missing, a)
			case t != a.Type:
				e.WrongType[a.Name] = t
			}
		}
		if len(e.Missing) > 0 || len(e.WrongType) > 0 {
			return e
		}
	}
	return nil
}

// namespaceRefusesSearchAttributes reports whether err is Temporal
// refusing a start for the namespace's search attributes rather than for
// the record: one of dedup's is not defined (the server's validator:
// "search attribute X is not defined"), or is defined with another type
// than the contract's ("invalid value for search attribute X of type
// Y: v": dedup's values are always of the contract's types, so the
// refusal is the namespace's), or, where the visibility store maps
// custom attributes per namespace (SQL visibility), the namespace has no
// mapping for one of dedup's ("Namespace N has no mapping defined for
// search attribute X": not created, or created and not yet in the
// frontend's namespace cache, refreshed every 2 s by default; or
// "Namespace N has no mapping defined for field name F" when it was
// removed between the start's mapping and its validation, which names
// a refused attribute by mapping its field back: dedup sends only its
// own attributes, so F is one of them). All
// InvalidArgument. Every start meets it
// until an operator creates or fixes the attribute (or turns them off),
// so it waits (not Permanent) rather than dead-lettering the stream;
// start-up checks for it first.
func namespaceRefusesSearchAttributes(err error) bool {
	var inv *serviceerror.InvalidArgument
	if !errors.As(err, &inv) {
		return false
	}
	m := inv.Message
	return strings.HasPrefix(m, "search attribute ") && strings.HasSuffix(m, " is not defined") ||
		strings.HasPrefix(m, "invalid value for search attribute Dedup") ||
		strings.HasPrefix(m, "Namespace ") && (strings.Contains(m, " has no mapping defined for search attribute Dedup") ||
			strings.Contains(m, " has no mapping defined for field name "))
}

// searchAttributes is req's search attributes, or nil when they are off.
func (t *Temporal) searchAttributes(req decide.StartRequest) (*commonpb.SearchAttributes, error) {
	if !t.attrs {
		return nil, nil
	}
	return EncodeSearchAttributes(req)
}
