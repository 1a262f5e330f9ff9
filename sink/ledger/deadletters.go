package ledger

import (
	"context"
	"fmt"

	"github.com/dedupio/dedup/processor"
)

func deadLetterArrays(dls []processor.DeadLetter) (topic []string, part []int32, off []int64, wf []string) {
	n := len(dls)
	topic, part, off, wf = make([]string, n), make([]int32, n), make([]int64, n), make([]string, n)
	for i, d := range dls {
		topic[i], part[i], off[i], wf[i] = d.Topic, d.Partition, d.Offset, d.WorkflowID
	}
	return
}

// Written says which dead letters were recorded already, in one query.
func (p *Postgres) Written(ctx context.Context, dls []processor.DeadLetter) ([]bool, error) {
	topic, part, off, wf := deadLetterArrays(dls)
	rows, err := p.pool.Query(ctx, `
SELECT i.ord, d.topic IS NOT NULL
FROM unnest($1::text[], $2::int4[], $3::int8[], $4::text[]) WITH ORDINALITY AS i(topic, kafka_partition, kafka_offset, workflow_id, ord)
LEFT JOIN dedup_dead_letters d USING (topic, kafka_partition, kafka_offset, workflow_id)`, topic, part, off, wf)
	if err != nil {
		return nil, p.classify(fmt.Errorf("checking %d dead letters: %w", len(dls), err))
	}
	defer rows.Close()
	out := make([]bool, len(dls))
	for rows.Next() {
		var ord int
		var written bool
		if err := rows.Scan(&ord, &written); err != nil {
			return nil, fmt.Errorf("checking dead letters: %w", err)
		}
		out[ord-1] = written
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("checking dead letters: %w", err)
	}
	return out, nil
}

// Record records written dead letters, in one statement. It inserts them
// in the log's key order (ORDER BY): an insert waits for another router's
// uncommitted insert of the same key, and two routers logging the same
// dead letters in orders of their own (a zombie and the partition's new
// owner) would each wait for the other.
func (p *Postgres) Record(ctx context.Context, dls []processor.DeadLetter) error {
	topic, part, off, wf := deadLetterArrays(dls)
	reason, errs, dlq := make([]string, len(dls)), make([]string, len(dls)), make([]string, len(dls))
	for i, d := range dls {
		reason[i], errs[i], dlq[i] = d.Reason, d.Error, d.DLQTopic
	}
	_, err := p.pool.Exec(ctx, `
INSERT INTO dedup_dead_letters (topic, kafka_partition, kafka_offset, workflow_id, reason, error, dead_letter_topic)
SELECT * FROM unnest($1::text[], $2::int4[], $3::int8[], $4::text[], $5::text[], $6::text[], $7::text[])
	AS d(topic, kafka_partition, kafka_offset, workflow_id, reason, error, dead_letter_topic)
ORDER BY d.topic, d.kafka_partition, d.kafka_offset, d.workflow_id
ON CONFLICT DO NOTHING`, topic, part, off, wf, reason, errs, dlq)
	if err != nil {
		return p.classify(fmt.Errorf("recording %d dead letters: %w", len(dls), err))
	}
	return nil
}
