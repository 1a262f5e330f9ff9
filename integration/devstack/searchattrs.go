package devstack

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"

	"github.com/dedupio/dedup/sink/starter"
)

// dedupSearchAttributes is dedup's search attributes (starter's
// contract), as the server's namespace config and AddSearchAttributes
// take them. The in-memory SQLite visibility store keeps custom attributes
// in pre-allocated columns (10 Keyword, 3 Int, 3 Datetime, …): dedup's 4
// Keyword, 2 Int and 1 Datetime fit.
func dedupSearchAttributes() map[string]enumspb.IndexedValueType {
	m := map[string]enumspb.IndexedValueType{}
	for _, a := range starter.SearchAttributes() {
		m[a.Name] = a.Type
	}
	return m
}

// RegisterSearchAttributes adds dedup's search attributes to namespace ns,
// as an operator does (`temporal operator search-attribute create`); the
// namespaces StartTemporal creates have them already. Attributes ns has
// already are left as they are.
func RegisterSearchAttributes(ctx context.Context, ops operatorservice.OperatorServiceClient, ns string) error {
	if _, err := ops.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: ns, SearchAttributes: dedupSearchAttributes()}); err != nil {
		return fmt.Errorf("adding dedup's search attributes to namespace %s: %w", ns, err)
	}
	return nil
}
