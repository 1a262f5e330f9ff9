package tracing

import "github.com/dedupio/dedup/connect/tracing/recordcarrier"

// RecordCarrier carries a trace context in a Kafka record's headers
// (package recordcarrier, which links no OpenTelemetry SDK).
type RecordCarrier = recordcarrier.RecordCarrier
