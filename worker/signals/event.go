package signals

import "encoding/json"

// Event is the payload of the signal a signal route sends: one Kafka event,
// as the router decoded it.
//
// This is the one place that names the router's type. Until
// schemas.SignalEvent lands (the router's branch), Event mirrors its
// expected shape; then this declaration becomes
//
//	type Event = schemas.SignalEvent
//
// and nothing else in the package changes. Fields are only ever added:
// running workflows and their carried State (Pending) hold encoded Events.
type Event struct {
	// EventID is the event's identity, as the route's ID rule found it: the
	// key the Receiver drops repeats by.
	EventID string `json:"event_id"`
	// DeliveryID names this delivery of the event (the router's request ID):
	// a re-drive of the same event has the same EventID and may have another
	// DeliveryID. Informational here.
	DeliveryID string `json:"delivery_id,omitempty"`
	Type       string `json:"type"`
	Source     string `json:"source,omitempty"`
	Time       string `json:"time,omitempty"`
	Subject    string `json:"subject,omitempty"`
	// Data is the event's data when it is JSON; null otherwise.
	Data json.RawMessage `json:"data,omitempty"`
	// DataBase64 is the data when it is not JSON (base64 in JSON).
	DataBase64 []byte `json:"data_base64,omitempty"`
	// ContentType is the data's media type as the producer declared it.
	ContentType string `json:"datacontenttype,omitempty"`
}
