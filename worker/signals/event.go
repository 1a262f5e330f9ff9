package signals

import "github.com/dedupio/dedup/schemas"

// Event is the payload of the signal a signal route sends: one Kafka event,
// as the router decoded it (schemas.SignalEvent: its EventID is the key the
// Receiver drops repeats by; its DeliveryID, signal-{route}:{event_id}, is
// the same on every re-delivery).
type Event = schemas.SignalEvent
