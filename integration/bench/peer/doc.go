// Package peer is the job dedup does, built the way a Go team would build
// it with Watermill: a watermill-kafka (sarama) consumer-group subscriber,
// a message.Router whose handler starts the Temporal workflow, and
// Watermill's own middleware.Deduplicator in front of it.
//
// It exists to be measured side by side with dedup (throughput, latency,
// Temporal calls, and what each guarantees), so it is configured as the
// Watermill docs show and not tuned:
//   - subscriber: kafka.DefaultSaramaSubscriberConfig with
//     Consumer.Offsets.Initial = OffsetOldest (the docs' example); sarama
//     auto-commits the offsets the subscriber marks on ack, every second
//     and on close. One message per partition is in flight at a time.
//   - deduplicator: middleware.Deduplicator with
//     NewMapExpiringKeyRepository(Window) (in memory, per process) and a
//     KeyFactory reading the event ID from metadata
//     (NewMessageHasherFromMetadataField), which a middleware in front of
//     it sets from processor/eventid's decoder: the same event ID dedup
//     derives, not Watermill's default Adler-32 of the payload (which
//     would miss re-sends with reordered JSON keys).
//   - handler: per route the event matches, client.ExecuteWorkflow with
//     workflow ID activity-{route}:{event ID} (decide.WorkflowID),
//     WorkflowIDReusePolicy REJECT_DUPLICATE and
//     WorkflowExecutionErrorWhenAlreadyStarted, so that "already started"
//     comes back as an error, which the handler counts and treats as
//     success.
//
// What it does not guarantee, by construction (Guarantees measures it):
// the deduplicator's memory is per process and expires after Window, so a
// restart, a second replica or a replay older than Window sends every
// event to Temporal again, and only Temporal's workflow ID retention stops
// a second execution. The deduplicator records a key before the handler
// runs: a handler that fails (Temporal unavailable) is nacked and
// redelivered, and the redelivery is dropped as a duplicate, so the event
// is lost (Result.Lost counts these).
package peer
