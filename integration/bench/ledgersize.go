package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// The ledger-size stages answer two questions of the issue, on demand
// (minutes to hours at 50M rows, not CI):
//   - does the claim statement keep its throughput from 0.1M to 50M
//     ledger rows (LedgerScale);
//   - what does retention cost at that size: today's batched DELETE
//     (ledger.Purge) against a ledger partitioned by day whose oldest
//     partition is dropped whole, and can a partitioned ledger still
//     promise one row per workflow ID (RetentionCost).
//
// Both fill the ledger with generate_series: workflow IDs of the shape
// the routes make (activity-order-confirmation:<uuid>, random in the
// index like real event IDs), started rows whose claimed_at, started_at and
// updated_at spread evenly over the retention window, oldest first in the
// heap (the order a live ledger is written in). The primary key is dropped
// before a fill and rebuilt after it (one sort instead of millions of
// random B-tree inserts): the schema is the same afterwards, but the
// rebuilt index is denser (about 90% full) than one grown by random
// inserts (about 70%), so the figures are a little kind to large ledgers.

// ScalePoint is the claim statement's throughput at one ledger size.
type ScalePoint struct {
	Rows int `json:"ledger_rows"`
	// New claims IDs not in the ledger; Duplicate claims them again once
	// started (the replay path: a batch's records of each partition a run
	// of offsets, as a poll's). Batches of ClaimBatch intents.
	New       Rate        `json:"new"`
	Duplicate Rate        `json:"duplicate"`
	NewMs     Percentiles `json:"new_batch_latency_ms"`
	DupMs     Percentiles `json:"duplicate_batch_latency_ms"`
	// NewVsFirst and DupVsFirst are the rates over the first size's: the
	// issue asks for both within 10% (at least 0.9).
	NewVsFirst float64 `json:"new_vs_first"`
	DupVsFirst float64 `json:"duplicate_vs_first"`
	// Retry claims the same IDs once more from records of their own (a
	// producer's retries: other offsets), which the ledger finds by key,
	// not by their record as a replay's; RetryVsFirst as DupVsFirst.
	Retry        Rate    `json:"duplicate_retry"`
	RetryVsFirst float64 `json:"duplicate_retry_vs_first"`
	// Scattered claims them again from their own records in no order: no
	// run in a batch, each ID looked up by its record alone (the replay
	// path of batches without runs, and this stage's replay before
	// 2026-12-06); ScatteredVsFirst as DupVsFirst.
	Scattered        Rate    `json:"duplicate_scattered"`
	ScatteredVsFirst float64 `json:"duplicate_scattered_vs_first"`
	// Known reads the same records as a replay's router does since
	// known records (processor/known.go): which of them the ledger holds
	// started under their digest, by runs, without claiming them
	// (ledger.Postgres.Known); KnownVsFirst as DupVsFirst.
	Known        Rate        `json:"known"`
	KnownMs      Percentiles `json:"known_batch_latency_ms"`
	KnownVsFirst float64     `json:"known_vs_first"`
	// TableMiB and IndexMiB are the ledger's heap and indexes.
	// NewWAL and DupWAL are the WAL bytes the claims wrote per row
	// (pg_current_wal_lsn before and after; the server's full-page images
	// included: the first change of a page after a checkpoint logs the
	// whole 8 KiB page, and random keys touch a new leaf page per row
	// once the index outgrows what a checkpoint interval rewrites).
	NewWAL      float64 `json:"new_wal_bytes_per_row"`
	DupWAL      float64 `json:"duplicate_wal_bytes_per_row"`
	TableMiB    float64 `json:"table_mib"`
	IndexMiB    float64 `json:"index_mib"`
	FillSeconds float64 `json:"fill_seconds"`
	// Why (ledgerio.go): the blocks and full-page images of each phase,
	// bytes per row, the unique index's shape and, at the largest size,
	// where a row's heap bytes go.
	NewIO            IOPhase            `json:"new_io"`
	DupIO            IOPhase            `json:"duplicate_io"`
	HeapBytesPerRow  float64            `json:"heap_bytes_per_row"`
	IndexBytesPerRow float64            `json:"index_bytes_per_row"`
	Key              KeyShape           `json:"key_index"`
	Settings         string             `json:"settings,omitempty"`
	Columns          map[string]float64 `json:"column_bytes,omitempty"`
}

// ClaimBatch is the batch the ledger-size stages claim in.
const ClaimBatch = 1000

// scaleWindow is the retention window the fill spreads rows over.
const scaleWindow = 7 * 24 * time.Hour

// LedgerScale grows one fresh ledger to each size in turn (ascending) and
// measures, at each, claims of claims new workflow IDs and then of the same
// IDs once started, in batches of ClaimBatch. With ordered, every event ID
// is a UUIDv7 (time first), the fill's and the claims' alike: the claims
// land on the newest pages of the primary key instead of random ones.
func (e *Env) LedgerScale(ctx context.Context, sizes []int, claims int, ordered bool) ([]ScalePoint, error) {
	pool, _, url, err := e.database(ctx)
	if err != nil {
		return nil, err
	}
	defer e.dropDatabase(ctx, pool, url)
	if len(sizes) == 0 {
		return nil, errors.New("ledger scale: no sizes")
	}
	final := sizes[len(sizes)-1]
	t0 := time.Now()
	var out []ScalePoint
	filled := 0
	for i, size := range sizes {
		if size < filled {
			return out, fmt.Errorf("ledger scale: sizes must ascend (%d after %d)", size, filled)
		}
		began := time.Now()
		if err := fillLedger(ctx, pool, "dedup_ledger", filled, size, final, t0, scaleWindow, true, ordered); err != nil {
			return out, err
		}
		filled = size
		pt := ScalePoint{Rows: size, FillSeconds: time.Since(began).Seconds()}
		led := ledger.NewFromPool(pool)
		// Records after every filled one (the fill's row g is offset g of
		// partition g % 12): each claimed row has a record of its own, as
		// in a topic, and a replay of them finds them by it.
		intents := uuidIntents(uint64(i+1), claims, ordered, int64(final+i*claims))
		// Every size starts right after a checkpoint (best effort: a
		// DATABASE_URL user may not be allowed), so that each pays the
		// full-page images of its first touches alike.
		_, _ = pool.Exec(ctx, `CHECKPOINT`)
		key, err := keyIndex(ctx, pool)
		if err != nil {
			return out, err
		}
		io0, err := readIO(ctx, pool, key)
		if err != nil {
			return out, err
		}
		from, err := walLSN(ctx, pool)
		if err != nil {
			return out, err
		}
		if pt.New, pt.NewMs, err = claimAll(ctx, led, intents, decide.VerdictNew); err != nil {
			return out, err
		}
		if pt.NewWAL, err = walPerRow(ctx, pool, from, len(intents)); err != nil {
			return out, err
		}
		io1, err := readIO(ctx, pool, key)
		if err != nil {
			return out, err
		}
		pt.NewIO = phase(io0, io1, len(intents))
		if err := markAllStarted(ctx, led, intents); err != nil {
			return out, err
		}
		if io0, err = readIO(ctx, pool, key); err != nil {
			return out, err
		}
		if from, err = walLSN(ctx, pool); err != nil {
			return out, err
		}
		if pt.Duplicate, pt.DupMs, err = claimAll(ctx, led, intents, decide.VerdictDuplicate); err != nil {
			return out, err
		}
		if pt.DupWAL, err = walPerRow(ctx, pool, from, len(intents)); err != nil {
			return out, err
		}
		if io1, err = readIO(ctx, pool, key); err != nil {
			return out, err
		}
		pt.DupIO = phase(io0, io1, len(intents))
		if pt.Known, pt.KnownMs, err = knownAll(ctx, led, intents); err != nil {
			return out, err
		}
		// The same replay of records taken in no order: a batch's records
		// of a partition are scattered over its offsets, no run, and each
		// ID is looked up by its record alone (startedSQL).
		scattered := slices.Clone(intents)
		rand.New(rand.NewPCG(uint64(i+1), 0x5ca7)).Shuffle(len(scattered), func(a, b int) { scattered[a], scattered[b] = scattered[b], scattered[a] })
		if pt.Scattered, _, err = claimAll(ctx, led, scattered, decide.VerdictDuplicate); err != nil {
			return out, err
		}
		retries := slices.Clone(intents)
		for j := range retries {
			retries[j].Offset += int64(len(sizes) * claims)
		}
		if pt.Retry, _, err = claimAll(ctx, led, retries, decide.VerdictDuplicate); err != nil {
			return out, err
		}
		var table, index int64
		if err := pool.QueryRow(ctx, `SELECT pg_relation_size('dedup_ledger'), pg_indexes_size('dedup_ledger')`).Scan(&table, &index); err != nil {
			return out, err
		}
		pt.TableMiB, pt.IndexMiB = float64(table)/(1<<20), float64(index)/(1<<20)
		rows := size + len(intents)
		pt.HeapBytesPerRow, pt.IndexBytesPerRow = float64(table)/float64(rows), float64(index)/float64(rows)
		pt.Key = keyShape(ctx, pool, key, rows)
		if i == len(sizes)-1 {
			if pt.Columns, err = columnBytes(ctx, pool, rows, 50000); err != nil {
				return out, err
			}
		}
		_ = pool.QueryRow(ctx, `SELECT format('shared_buffers %s, effective_cache_size %s, max_wal_size %s, checkpoint_timeout %s, full_page_writes %s, wal_compression %s, fsync %s, PostgreSQL %s',
			current_setting('shared_buffers'), current_setting('effective_cache_size'), current_setting('max_wal_size'), current_setting('checkpoint_timeout'),
			current_setting('full_page_writes'), current_setting('wal_compression'), current_setting('fsync'), current_setting('server_version'))`).Scan(&pt.Settings)
		if len(out) > 0 {
			pt.NewVsFirst, pt.DupVsFirst = pt.New.PerSec/out[0].New.PerSec, pt.Duplicate.PerSec/out[0].Duplicate.PerSec
			pt.RetryVsFirst = pt.Retry.PerSec / out[0].Retry.PerSec
			pt.ScatteredVsFirst = pt.Scattered.PerSec / out[0].Scattered.PerSec
			pt.KnownVsFirst = pt.Known.PerSec / out[0].Known.PerSec
		} else {
			pt.NewVsFirst, pt.DupVsFirst, pt.RetryVsFirst, pt.ScatteredVsFirst, pt.KnownVsFirst = 1, 1, 1, 1, 1
		}
		out = append(out, pt)
		e.Log.Info("ledger scale", "rows", size, "new_per_sec", int(pt.New.PerSec), "dup_per_sec", int(pt.Duplicate.PerSec), "known_per_sec", int(pt.Known.PerSec), "scattered_per_sec", int(pt.Scattered.PerSec), "retry_per_sec", int(pt.Retry.PerSec),
			"index_mib", int(pt.IndexMiB), "fill_s", int(pt.FillSeconds))
	}
	return out, nil
}

// walLSN is the server's current WAL position.
func walLSN(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var s string
	err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s)
	return s, err
}

// walPerRow is the WAL written since from, per row of n.
func walPerRow(ctx context.Context, pool *pgxpool.Pool, from string, n int) (float64, error) {
	var b int64
	if err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::int8`, from).Scan(&b); err != nil {
		return 0, err
	}
	return float64(b) / float64(n), nil
}

// fillLedger adds the rows [from, to) of a ledger of final rows to table:
// row g was claimed at t0 - window*(1-g/final), oldest first. With
// rebuild, the primary key is dropped first and built again after. With
// ordered, the event IDs are time-ordered (UUIDv7), else random.
func fillLedger(ctx context.Context, pool *pgxpool.Pool, table string, from, to, final int, t0 time.Time, window time.Duration, rebuild, ordered bool) error {
	if to <= from {
		return nil
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	exec := func(sql string, args ...any) error {
		_, err := conn.Exec(ctx, sql, args...)
		return err
	}
	if err := exec(`SET maintenance_work_mem = '1GB'`); err != nil {
		return err
	}
	// The unique key (the primary key on workflow_id before migration
	// 00012, the index dedup_ledger_key after) is dropped and built again
	// from its own definition.
	var drop, create string
	if rebuild {
		err := conn.QueryRow(ctx, `SELECT CASE WHEN c.conname IS NULL THEN format('DROP INDEX %s', x.indexrelid::regclass)
				ELSE format('ALTER TABLE %s DROP CONSTRAINT %I', x.indrelid::regclass, c.conname) END,
			CASE WHEN c.conname IS NULL THEN pg_get_indexdef(x.indexrelid)
				ELSE format('ALTER TABLE %s ADD CONSTRAINT %I %s', x.indrelid::regclass, c.conname, pg_get_constraintdef(c.oid)) END
			FROM pg_index x LEFT JOIN pg_constraint c ON c.conindid = x.indexrelid AND c.contype IN ('p', 'u')
			WHERE x.indrelid = $1::regclass AND x.indisunique ORDER BY x.indexrelid LIMIT 1`, table).Scan(&drop, &create)
		if err != nil {
			return fmt.Errorf("reading the unique key of %s: %w", table, err)
		}
		if err := exec(drop); err != nil {
			return fmt.Errorf("dropping the unique key for the fill: %w", err)
		}
	}
	// A random event ID is a UUID of g's md5; an ordered one a UUIDv7 of
	// the row's claim time (48 bits of Unix milliseconds, version 7, the
	// variant 10, the md5's bits), so the IDs sort in the order the rows
	// were written.
	id := `md5(g::text)::uuid::text`
	if ordered {
		id = `substr(v.h, 1, 8) || '-' || substr(v.h, 9, 4) || '-7' || substr(v.r, 1, 3) || '-' || to_hex(8 + ('x' || substr(v.r, 4, 1))::bit(4)::int % 4) || substr(v.r, 5, 3) || '-' || substr(v.r, 8, 12)`
	}
	// Since migration 00012 the key column is filled here, as a router
	// fills it (the trigger would too, a row at a time).
	var keyed bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'key' AND NOT attisdropped)`, table).Scan(&keyed); err != nil {
		return err
	}
	keyCol, keyVal := "", ""
	if keyed {
		keyCol, keyVal = ", key", ", dedup_ledger_key('activity-order-confirmation:' || y.e)"
	}
	// Since migration 00016 a router's claim writes its record's digest
	// and intent count (processor/known.go): the filled rows carry them
	// too, so that the rows are as wide as a router's.
	var digested bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'record_digest' AND NOT attisdropped)`, table).Scan(&digested); err != nil {
		return err
	}
	if digested {
		keyCol, keyVal = keyCol+", record_digest, record_intents", keyVal+", md5('record' || g)::uuid, 1"
	}
	err = exec(fmt.Sprintf(`INSERT INTO %s (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset,
		state, run_id, attempts, claimed_at, started_at, updated_at, generation%s)
	SELECT 'activity-order-confirmation:' || y.e, 'order-confirmation', y.e, 'field', sha256(g::text::bytea), 'events', (g %% 12)::int, g,
		'started', md5('run' || g)::uuid::text, 1, x.t, x.t + interval '50 milliseconds', x.t + interval '50 milliseconds', 1%s
	FROM generate_series($1::bigint, $2::bigint - 1) g,
		LATERAL (SELECT $3::timestamptz - make_interval(secs => $4::float8 * (1 - g::float8 / $5::float8)) AS t) x,
		LATERAL (SELECT lpad(to_hex(floor(extract(epoch FROM x.t) * 1000)::bigint), 12, '0') AS h, md5(g::text) AS r) v,
		LATERAL (SELECT %s AS e) y`, table, keyCol, keyVal, id),
		from, to, t0, window.Seconds(), final)
	if err != nil {
		return fmt.Errorf("filling %s to %d rows: %w", table, to, err)
	}
	if rebuild {
		if err := exec(create); err != nil {
			return fmt.Errorf("rebuilding the unique key: %w", err)
		}
	}
	return exec(`VACUUM ANALYZE ` + table)
}

// uuidIntents are n intents with fresh event IDs: random UUIDs, or with
// ordered UUIDv7s of now on, ten events a millisecond. Their records lie
// as a topic's do, each partition's offsets consecutive: intent i is
// partition i mod 12 at offset first + i/12, so that a batch of them
// holds each partition's records as a run of offsets, as a router's poll
// does, and a replay of them is read as one (startedByRangeSQL).
func uuidIntents(seed uint64, n int, ordered bool, first int64) []decide.Intent {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	now := time.Now().UnixMilli()
	out := make([]decide.Intent, n)
	for i := range out {
		id := fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x", rng.Uint32(), rng.Uint32()&0xffff, rng.Uint32()&0xfff, rng.Uint32()&0x3fff|0x8000, rng.Uint64()&0xffffffffffff)
		if ordered {
			ms := now + int64(i/10)
			id = fmt.Sprintf("%08x-%04x-7%03x-%04x-%012x", ms>>16, ms&0xffff, rng.Uint32()&0xfff, rng.Uint32()&0x3fff|0x8000, rng.Uint64()&0xffffffffffff)
		}
		out[i] = decide.Intent{WorkflowID: decide.WorkflowID("order-confirmation", id), ActivityID: "order-confirmation",
			EventID: id, IDRule: "field", Topic: "events", Partition: int32(i % 12), Offset: first + int64(i/12)}
		out[i].PayloadHash[0], out[i].PayloadHash[1] = byte(i), byte(i>>8)
		// Its record's digest, as a router's claim writes it (one intent
		// a record).
		out[i].Known = decide.Known{Intents: 1}
		binary.BigEndian.PutUint64(out[i].Known.Digest[:8], rng.Uint64())
		binary.BigEndian.PutUint64(out[i].Known.Digest[8:], rng.Uint64())
	}
	return out
}

// knownAll reads, in batches of ClaimBatch, which of the intents' records
// the ledger knows (ledger.Postgres.Known), and checks it knows each: the
// intents were claimed with their digests and marked started.
func knownAll(ctx context.Context, led *ledger.Postgres, intents []decide.Intent) (Rate, Percentiles, error) {
	var lat []time.Duration
	look := make([]processor.KnownRecord, 0, ClaimBatch)
	known := make([]int32, ClaimBatch)
	began := time.Now()
	for i := 0; i < len(intents); i += ClaimBatch {
		t := time.Now()
		batch := intents[i:min(i+ClaimBatch, len(intents))]
		look = look[:0]
		for _, in := range batch {
			look = append(look, processor.KnownRecord{Topic: in.Topic, Partition: in.Partition, Offset: in.Offset, Digest: in.Known.Digest})
		}
		if err := led.Known(ctx, look, known[:len(batch)]); err != nil {
			return Rate{}, Percentiles{}, err
		}
		lat = append(lat, time.Since(t))
		for j, k := range known[:len(batch)] {
			if k != 1 {
				return Rate{}, Percentiles{}, fmt.Errorf("the ledger knows the record of %s as %d intents, want 1", batch[j].WorkflowID, k)
			}
		}
	}
	return rate(len(intents), time.Since(began)), percentiles(lat), nil
}

// claimAll claims intents in batches of ClaimBatch and checks every
// verdict is want.
func claimAll(ctx context.Context, led *ledger.Postgres, intents []decide.Intent, want decide.Verdict) (Rate, Percentiles, error) {
	var lat []time.Duration
	began := time.Now()
	for i := 0; i < len(intents); i += ClaimBatch {
		t := time.Now()
		batch := intents[i:min(i+ClaimBatch, len(intents))]
		vs, err := led.Claim(ctx, batch)
		if err != nil {
			return Rate{}, Percentiles{}, err
		}
		lat = append(lat, time.Since(t))
		for j, v := range vs {
			if v.Verdict != want {
				return Rate{}, Percentiles{}, fmt.Errorf("claim of %s gave %s, want %s", batch[j].WorkflowID, v.Verdict, want)
			}
		}
	}
	return rate(len(intents), time.Since(began)), percentiles(lat), nil
}

func markAllStarted(ctx context.Context, led *ledger.Postgres, intents []decide.Intent) error {
	for i := 0; i < len(intents); i += 5000 {
		chunk := intents[i:min(i+5000, len(intents))]
		started := make([]processor.Started, len(chunk))
		for j, in := range chunk {
			started[j] = processor.Started{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1}
		}
		if err := led.MarkStarted(ctx, started); err != nil {
			return err
		}
	}
	return nil
}

// PurgeCost is one way of removing the oldest day of the ledger.
type PurgeCost struct {
	Rows     int64   `json:"rows_removed"`
	Seconds  float64 `json:"seconds"`
	WALBytes int64   `json:"wal_bytes"`
	// Sizes of the table's heap and indexes before and after (a DELETE
	// leaves them as they were: the space is reused, not returned).
	TableBefore int64 `json:"table_bytes_before"`
	TableAfter  int64 `json:"table_bytes_after"`
	IndexBefore int64 `json:"index_bytes_before"`
	IndexAfter  int64 `json:"index_bytes_after"`
	// VacuumSeconds and VacuumWALBytes are what the VACUUM that
	// reclaims the removed rows took (for a DELETE, the cost handed to
	// autovacuum; for a dropped partition, nearly nothing).
	VacuumSeconds    float64 `json:"vacuum_seconds"`
	VacuumWALBytes   int64   `json:"vacuum_wal_bytes"`
	IndexAfterVacuum int64   `json:"index_bytes_after_vacuum"`
	// Bloat of the plain ledger (pgstattuple; -1 where the extension
	// could not be created, 0 for a dropped partition, which leaves
	// none): the heap's dead tuples after the removal, its free space
	// after VACUUM (reused by new rows, never returned), and the primary
	// key's average leaf density after VACUUM (a fresh index is ~90).
	DeadTuplePct     float64 `json:"dead_tuple_pct"`
	FreePctAfter     float64 `json:"free_pct_after_vacuum"`
	IndexLeafDensity float64 `json:"index_leaf_density_after_vacuum"`
}

// RetentionResult compares today's purge with dropping a day partition.
type RetentionResult struct {
	Rows int `json:"ledger_rows"`
	Days int `json:"window_days"`
	// FullPageWrites is the server's setting: off (the throwaway test
	// cluster) leaves the full-page images out of the WAL figures, which a
	// production server (on) writes after every checkpoint.
	FullPageWrites string `json:"full_page_writes"`
	// Delete is ledger.Purge (batched DELETE, PurgeBatch 10000) removing
	// the rows started more than Days-1 days ago: the oldest day.
	Delete PurgeCost `json:"batched_delete"`
	// DropPartition is DETACH and DROP of the oldest day's partition of
	// the same rows in a ledger partitioned by range of claimed_at.
	DropPartition PurgeCost `json:"drop_partition"`
	// UniqueWorkflowIDError is PostgreSQL's answer to a primary key on
	// workflow_id alone on the partitioned table; OnConflictError its
	// answer to the claim's ON CONFLICT (workflow_id) there.
	UniqueWorkflowIDError string `json:"unique_workflow_id_error"`
	OnConflictError       string `json:"on_conflict_workflow_id_error"`
	// RowsAfterTwoClaims is how many rows one workflow ID has after two
	// claims of it on the partitioned table (primary key (workflow_id,
	// claimed_at), ON CONFLICT on it): 1 keeps exactly-once, 2 is a second
	// VerdictNew, so a second start.
	RowsAfterTwoClaims int `json:"rows_after_two_claims"`
	// LookupPlain and LookupPartitioned read ClaimBatch existing workflow
	// IDs per statement (the replay path's read) from the plain and the
	// partitioned ledger: without the partition key in the predicate,
	// every partition's index is probed.
	LookupPlain       Rate `json:"lookup_plain"`
	LookupPartitioned Rate `json:"lookup_partitioned"`
	Partitions        int  `json:"partitions"`
	// PurgeScans is how the purge read the ledger (pg_stat_user_tables
	// over the Purge call). Before migration 00007 each batch found its
	// rows by a sequential scan (no index on started_at); now each walks
	// the partial index dedup_ledger_started.
	PurgeScans TableScans `json:"purge_scans"`
}

// TableScans are a table's scan counters over an interval.
type TableScans struct {
	SeqScans      int64 `json:"seq_scans"`
	SeqTuplesRead int64 `json:"seq_tuples_read"`
	IndexScans    int64 `json:"index_scans"`
}

// RetentionCost fills a fresh ledger with rows started over days days,
// copies it into a ledger partitioned by day, and removes the oldest day
// from each: with ledger.Purge (the code dedup's purge loop runs) from the
// plain one, by dropping a partition from the other.
func (e *Env) RetentionCost(ctx context.Context, rows, days int) (RetentionResult, error) {
	res := RetentionResult{Rows: rows, Days: days, Partitions: days + 1}
	if days < 2 {
		return res, errors.New("retention cost: want at least 2 days")
	}
	pool, _, url, err := e.database(ctx)
	if err != nil {
		return res, err
	}
	defer e.dropDatabase(ctx, pool, url)
	day := 24 * time.Hour
	window := time.Duration(days) * day
	t0 := time.Now().Truncate(time.Second)
	if err := fillLedger(ctx, pool, "dedup_ledger", 0, rows, rows, t0, window, true, false); err != nil {
		return res, err
	}
	if err := pool.QueryRow(ctx, `SHOW full_page_writes`).Scan(&res.FullPageWrites); err != nil {
		return res, err
	}
	if err := e.partitionedCopy(ctx, pool, &res, t0, window, days); err != nil {
		return res, err
	}
	probe := uuidProbe(rows, 20*ClaimBatch)
	if res.LookupPlain, err = lookupRate(ctx, pool, "dedup_ledger", probe); err != nil {
		return res, err
	}
	if res.LookupPartitioned, err = lookupRate(ctx, pool, "dedup_ledger_by_day", probe); err != nil {
		return res, err
	}
	// Today's purge: everything started more than days-1 days ago, on a
	// one-connection pool, whose statistics are flushed on demand.
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return res, err
	}
	pc.MaxConns = 1
	one, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return res, err
	}
	defer one.Close()
	led := ledger.NewFromPool(one)
	res.Delete, err = measureRemoval(ctx, pool, "dedup_ledger", true, func(ctx context.Context) (int64, error) {
		before, err := tableScans(ctx, one, "dedup_ledger")
		if err != nil {
			return 0, err
		}
		n, err := led.Purge(ctx, window-day, ledger.DefaultConfig().PurgeBatch)
		if err != nil {
			return n, err
		}
		after, err := tableScans(ctx, one, "dedup_ledger")
		res.PurgeScans = TableScans{SeqScans: after.SeqScans - before.SeqScans, SeqTuplesRead: after.SeqTuplesRead - before.SeqTuplesRead,
			IndexScans: after.IndexScans - before.IndexScans}
		return n, err
	})
	if err != nil {
		return res, err
	}
	var oldest int64 // counted outside the timing
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM dedup_ledger_by_day_0`).Scan(&oldest); err != nil {
		return res, err
	}
	res.DropPartition, err = measureRemoval(ctx, pool, "dedup_ledger_by_day", false, func(ctx context.Context) (int64, error) {
		if _, err := pool.Exec(ctx, `ALTER TABLE dedup_ledger_by_day DETACH PARTITION dedup_ledger_by_day_0`); err != nil {
			return 0, err
		}
		_, err := pool.Exec(ctx, `DROP TABLE dedup_ledger_by_day_0`)
		return oldest, err
	})
	e.Log.Info("retention cost", "rows", rows, "delete_s", res.Delete.Seconds, "delete_wal", res.Delete.WALBytes,
		"drop_s", res.DropPartition.Seconds, "drop_wal", res.DropPartition.WALBytes)
	return res, err
}

// partitionedCopy creates dedup_ledger_by_day, partitioned by range of
// claimed_at, one partition per day of the window (partition 0 the
// oldest) and one for the day after, copies the ledger into it, and
// records what PostgreSQL says to keeping workflow IDs unique there.
func (e *Env) partitionedCopy(ctx context.Context, pool *pgxpool.Pool, res *RetentionResult, t0 time.Time, window time.Duration, days int) error {
	if _, err := pool.Exec(ctx, `CREATE TABLE dedup_ledger_by_day (LIKE dedup_ledger INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
		PARTITION BY RANGE (claimed_at)`); err != nil {
		return err
	}
	// The key column of migration 00012 is not this comparison's: its
	// rows below are inserted without one.
	if _, err := pool.Exec(ctx, `DO $$ BEGIN
		IF EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'dedup_ledger_by_day'::regclass AND attname = 'key') THEN
			ALTER TABLE dedup_ledger_by_day ALTER COLUMN key DROP NOT NULL;
		END IF; END $$`); err != nil {
		return err
	}
	start := t0.Add(-window)
	for i := 0; i <= days; i++ {
		from, to := start.Add(time.Duration(i)*24*time.Hour), start.Add(time.Duration(i+1)*24*time.Hour)
		if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE dedup_ledger_by_day_%d PARTITION OF dedup_ledger_by_day
			FOR VALUES FROM ('%s') TO ('%s')`, i, from.UTC().Format(time.RFC3339Nano), to.UTC().Format(time.RFC3339Nano))); err != nil {
			return err
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO dedup_ledger_by_day SELECT * FROM dedup_ledger`); err != nil {
		return fmt.Errorf("copying the ledger into partitions: %w", err)
	}
	// A primary key on workflow_id alone: refused, the partition key is
	// not in it.
	_, err := pool.Exec(ctx, `ALTER TABLE dedup_ledger_by_day ADD PRIMARY KEY (workflow_id)`)
	res.UniqueWorkflowIDError = pgMessage(err)
	if _, err := pool.Exec(ctx, `SET maintenance_work_mem = '1GB'; ALTER TABLE dedup_ledger_by_day ADD PRIMARY KEY (workflow_id, claimed_at)`); err != nil {
		return fmt.Errorf("adding the partitioned primary key: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE dedup_ledger_by_day`); err != nil {
		return err
	}
	// The claim's conflict target: no unique index matches it.
	insert := `INSERT INTO dedup_ledger_by_day (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset)
		VALUES ('activity-order-confirmation:twice', 'order-confirmation', 'twice', 'field', '\x00', 'events', 0, 0) `
	_, err = pool.Exec(ctx, insert+`ON CONFLICT (workflow_id) DO NOTHING`)
	res.OnConflictError = pgMessage(err)
	// The conflict target the partitioned key allows, claimed twice (two
	// transactions: two claimed_at): both insert.
	for range 2 {
		if _, err := pool.Exec(ctx, insert+`ON CONFLICT (workflow_id, claimed_at) DO NOTHING`); err != nil {
			return fmt.Errorf("claiming on the partitioned ledger: %w", err)
		}
	}
	return pool.QueryRow(ctx, `SELECT count(*) FROM dedup_ledger_by_day WHERE workflow_id = 'activity-order-confirmation:twice'`).Scan(&res.RowsAfterTwoClaims)
}

// dropDatabase closes pool and, on the throwaway cluster, drops its
// database: at 50M rows a ledger takes some 20 GB of disk.
func (e *Env) dropDatabase(ctx context.Context, pool *pgxpool.Pool, url string) {
	pool.Close()
	if !e.In.CreateDatabases {
		return
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return
	}
	conn, err := pgx.Connect(ctx, e.In.DatabaseURL)
	if err != nil {
		e.Log.Warn("dropping a ledger-size database", "err", err)
		return
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{cfg.Database}.Sanitize()+` WITH (FORCE)`); err != nil {
		e.Log.Warn("dropping a ledger-size database", "err", err)
	}
}

// tableScans reads table's scan counters on pool's one connection, after
// flushing that connection's pending statistics.
func tableScans(ctx context.Context, one *pgxpool.Pool, table string) (TableScans, error) {
	var s TableScans
	if _, err := one.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		return s, err
	}
	if _, err := one.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		return s, err
	}
	err := one.QueryRow(ctx, `SELECT coalesce(seq_scan, 0), coalesce(seq_tup_read, 0), coalesce(idx_scan, 0)
		FROM pg_stat_user_tables WHERE relname = $1`, table).Scan(&s.SeqScans, &s.SeqTuplesRead, &s.IndexScans)
	return s, err
}

func pgMessage(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code + " " + pe.Message
	}
	if err != nil {
		return err.Error()
	}
	return "" // accepted
}

// uuidProbe is n workflow IDs of a ledger filled with rows rows, spread
// over it.
func uuidProbe(rows, n int) []int64 {
	rng := rand.New(rand.NewPCG(uint64(rows), 3))
	n = min(n, rows)
	seen := make(map[int64]bool, n)
	out := make([]int64, 0, n)
	for len(out) < n {
		if g := rng.Int64N(int64(rows)); !seen[g] {
			seen[g] = true
			out = append(out, g)
		}
	}
	return out
}

// lookupRate reads the rows of the probe's generate_series numbers,
// ClaimBatch per statement (the workflow IDs are computed server-side, as
// fillLedger made them).
func lookupRate(ctx context.Context, pool *pgxpool.Pool, table string, probe []int64) (Rate, error) {
	ids := make([]string, 0, len(probe))
	rows, err := pool.Query(ctx, `SELECT 'activity-order-confirmation:' || md5(g::text)::uuid::text FROM unnest($1::int8[]) g`, probe)
	if err != nil {
		return Rate{}, err
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			rows.Close()
			return Rate{}, err
		}
		ids = append(ids, s)
	}
	rows.Close()
	// The plain ledger is found by its unique key: the expression index
	// of migration 00012 where it exists.
	pred := `workflow_id = ANY($1::text[])`
	var keyed bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'key' AND NOT attisdropped)`, table).Scan(&keyed); err != nil {
		return Rate{}, err
	}
	if keyed && table == "dedup_ledger" {
		pred = `key = ANY(ARRAY(SELECT dedup_ledger_key(w) FROM unnest($1::text[]) w)) AND workflow_id = ANY($1::text[])`
	}
	began := time.Now()
	for i := 0; i < len(ids); i += ClaimBatch {
		batch := ids[i:min(i+ClaimBatch, len(ids))]
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE `+pred+` AND state = 'started'`, batch).Scan(&n); err != nil {
			return Rate{}, err
		}
		if n != len(batch) {
			return Rate{}, fmt.Errorf("%s: found %d of %d workflow IDs", table, n, len(batch))
		}
	}
	return rate(len(ids), time.Since(began)), nil
}

// measureRemoval runs remove on table and measures its time, WAL, sizes,
// and then the VACUUM that reclaims what it left.
func measureRemoval(ctx context.Context, pool *pgxpool.Pool, table string, bloat bool, remove func(context.Context) (int64, error)) (PurgeCost, error) {
	var c PurgeCost
	sizes := func(heap, index *int64) error {
		// A partitioned table has no storage of its own: sum its
		// partitions.
		return pool.QueryRow(ctx, `SELECT coalesce(sum(pg_relation_size(r)), 0)::int8, coalesce(sum(pg_indexes_size(r)), 0)::int8
			FROM (SELECT $1::regclass AS r UNION ALL SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = $1::regclass) t`, table).Scan(heap, index)
	}
	lsn := func() (string, error) {
		var s string
		err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s)
		return s, err
	}
	walSince := func(from string) (int64, error) {
		var n int64
		err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::int8`, from).Scan(&n)
		return n, err
	}
	if err := sizes(&c.TableBefore, &c.IndexBefore); err != nil {
		return c, err
	}
	// Best effort (a DATABASE_URL user may not be allowed): after a
	// checkpoint, the WAL figure counts the full-page images a
	// production server writes on first touch of each page.
	_, _ = pool.Exec(ctx, `CHECKPOINT`)
	from, err := lsn()
	if err != nil {
		return c, err
	}
	began := time.Now()
	if c.Rows, err = remove(ctx); err != nil {
		return c, fmt.Errorf("removing the oldest day from %s: %w", table, err)
	}
	c.Seconds = time.Since(began).Seconds()
	if c.WALBytes, err = walSince(from); err != nil {
		return c, err
	}
	if err := sizes(&c.TableAfter, &c.IndexAfter); err != nil {
		return c, err
	}
	stattuple := bloat
	if bloat {
		// Best effort: the extension needs a superuser (the throwaway
		// cluster has one; a DATABASE_URL may not).
		if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pgstattuple`); err != nil {
			stattuple = false
			c.DeadTuplePct, c.FreePctAfter, c.IndexLeafDensity = -1, -1, -1
		}
	}
	if stattuple {
		if err := pool.QueryRow(ctx, `SELECT dead_tuple_percent FROM pgstattuple($1::regclass)`, table).Scan(&c.DeadTuplePct); err != nil {
			return c, err
		}
	}
	if from, err = lsn(); err != nil {
		return c, err
	}
	began = time.Now()
	if _, err := pool.Exec(ctx, `VACUUM `+table); err != nil {
		return c, err
	}
	c.VacuumSeconds = time.Since(began).Seconds()
	if c.VacuumWALBytes, err = walSince(from); err != nil {
		return c, err
	}
	var heap int64
	if err := sizes(&heap, &c.IndexAfterVacuum); err != nil {
		return c, err
	}
	if stattuple {
		key, err := keyIndex(ctx, pool)
		if err != nil {
			return c, err
		}
		return c, pool.QueryRow(ctx, `SELECT (SELECT free_percent FROM pgstattuple($1::regclass)), (SELECT avg_leaf_density FROM pgstatindex($2::regclass))`,
			table, key).Scan(&c.FreePctAfter, &c.IndexLeafDensity)
	}
	return c, err
}
