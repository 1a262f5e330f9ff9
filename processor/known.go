package processor

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/decide"
)

// A replay ends a record the ledger knows without deciding it again.
//
// Deciding a record (decode, event ID, routes, workflow IDs, payload
// hashes) is most of what a duplicate costs. But a record read again at
// the same coordinates, with the same bytes, decided by the same binary
// under the same deciding configuration, is decided the same way, and
// the claim of its intents would answer each of them a duplicate of its
// started row. So the claim that inserts a record's rows also writes, on
// each, the record's Known (decide.Known): a digest of the record's bytes
// and coordinates, of the binary and of the deciding configuration
// (knownPrint), and how many intents the decision had. While the ledger
// says most of the last claim's IDs were started (a replay), the router
// digests each polled record instead of deciding it, and asks the ledger
// (KnownLedger.Known) which records it holds that many started rows of,
// each claimed by the record at those coordinates with that digest. Those
// end as their duplicates would have: ok, counted as duplicate intents.
// The rest are decided and claimed as every record is.
//
// A record is written as known only when nothing of its duplicates but
// the end would happen: no route of it may run again (an allow_* policy
// asks Temporal for each duplicate, Route.MayRerun), and the router has
// no tenant keyring (its file is read again when it changes, so the same
// bytes may be decided otherwise later). The known path is not taken
// while tracing is on (each record's span is kept) or the log is at debug
// (each duplicate's workflow ID is logged), and for a while after a read
// that knew less than half of its records (rows of an older binary or
// configuration, of a ledger from before migration 00016): a read that
// finds little costs a round trip for nothing.

// KnownLedger is what a Ledger may also do for a replay (sink/ledger's
// Postgres does): a router whose Ledger is one writes each claimed
// record's decide.Known and ends the records a replay finds known.
type KnownLedger interface {
	// Replaying says whether most of the last claim's workflow IDs were
	// started already.
	Replaying() bool
	// Known sets known[i] (len(known) == len(records)) to the number of
	// intents of records[i] when the ledger holds that many started rows
	// claimed by the record at its coordinates, each written with its
	// digest and that number; else to 0. It changes no row.
	Known(ctx context.Context, records []KnownRecord, known []int32) error
}

// KnownRecord is a polled record as KnownLedger.Known looks it up: its
// coordinates and its digest.
type KnownRecord struct {
	Topic     string
	Partition int32
	Offset    int64
	Digest    [16]byte
}

// knownOffPolls is how many polls the known path is not taken after a
// read that knew less than half of its records.
const knownOffPolls = 64

// binarySum is the SHA-256 of this process's executable, read once: a
// new build may decide the same bytes otherwise.
var binarySum = sync.OnceValues(func() ([32]byte, error) {
	var sum [32]byte
	exe, err := os.Executable()
	if err != nil {
		return sum, err
	}
	f, err := os.Open(exe)
	if err != nil {
		return sum, err
	}
	defer func() { _ = f.Close() }() // read only
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, err
	}
	h.Sum(sum[:0])
	return sum, nil
})

// knownPrint is the digest of what decides a record besides its own
// bytes: the binary and cfg's deciding part (the event ID rules, the
// routes, max_value_bytes, no_route, the Schema Registry). It returns an
// error when records cannot be known: a tenant keyring, or a binary that
// cannot be read.
func knownPrint(cfg Config) ([32]byte, error) {
	var print [32]byte
	dc := cfg.Decide()
	if dc.TenantKeysFile != "" || dc.TenantKeys != nil {
		return print, errors.New("a tenant keyring is read again when its file changes")
	}
	bin, err := binarySum()
	if err != nil {
		return print, fmt.Errorf("reading the executable: %w", err)
	}
	conf, err := json.Marshal(struct {
		Decide         decide.Config
		SchemaRegistry any
	}{dc, cfg.SchemaRegistry})
	if err != nil {
		return print, fmt.Errorf("the deciding configuration: %w", err)
	}
	h := sha256.New()
	h.Write(bin[:])
	h.Write(conf)
	h.Sum(print[:0])
	return print, nil
}

// knownHashes are the digests' hashes, kept between records.
var knownHashes = sync.Pool{New: func() any { return &knownHash{h: sha256.New()} }}

type knownHash struct {
	h   hash.Hash
	buf [64]byte
	sum [32]byte
}

// knownDigest is kr's digest under print: every byte of the record the
// decision reads (its coordinates, key, value and headers; not its
// timestamp, which no decision reads), each field framed by its length (a
// nil key or value apart from an empty one).
func knownDigest(print *[32]byte, kr *kgo.Record) [16]byte {
	kh := knownHashes.Get().(*knownHash)
	h := kh.h
	h.Reset()
	h.Write(print[:])
	b := kh.buf[:0]
	b = binary.BigEndian.AppendUint32(b, uint32(kr.Partition))
	b = binary.BigEndian.AppendUint64(b, uint64(kr.Offset))
	b = binary.BigEndian.AppendUint32(b, uint32(len(kr.Headers)))
	h.Write(b)
	field := func(v []byte, null bool) {
		n := uint64(len(v))
		if null {
			n = 1 << 63
		}
		h.Write(binary.BigEndian.AppendUint64(kh.buf[:0], n))
		h.Write(v)
	}
	field([]byte(kr.Topic), false)
	field(kr.Key, kr.Key == nil)
	field(kr.Value, kr.Value == nil)
	for _, hd := range kr.Headers {
		field([]byte(hd.Key), false)
		field(hd.Value, hd.Value == nil)
	}
	h.Sum(kh.sum[:0])
	var d [16]byte
	copy(d[:], kh.sum[:16])
	knownHashes.Put(kh)
	return d
}

// KnownDigester returns the digest a router under cfg, in this binary,
// writes with the rows a record claims (decide.Known.Digest), or the
// reason such a router writes no record known (a tenant keyring, an
// executable it cannot read). It is for tools that fill a ledger as a
// router would have (the benchmark's prefilled replay); a record is known
// only by rows that carry the digest and its number of intents.
func KnownDigester(cfg Config) (func(kr *kgo.Record) [16]byte, error) {
	print, err := knownPrint(cfg)
	if err != nil {
		return nil, err
	}
	return func(kr *kgo.Record) [16]byte { return knownDigest(&print, kr) }, nil
}

// knownOf is the Known a record's intents carry: none unless the router
// writes them, the decision has intents, and no route of it may run
// again.
func (r *Router) knownOf(d *decide.Decision, digest [16]byte) decide.Known {
	if r.known == nil || len(d.Intents) == 0 || len(d.Intents) > 1<<15-1 {
		return decide.Known{}
	}
	for _, rt := range d.Routes {
		if rt.MayRerun() {
			return decide.Known{}
		}
	}
	return decide.Known{Digest: digest, Intents: int32(len(d.Intents))}
}

// knownPath says whether this poll's records are looked up as known
// before they are decided.
func (r *Router) knownPath() bool {
	if r.known == nil || r.trace != nil || !r.known.Replaying() {
		return false
	}
	if r.knownOff.Load() > 0 {
		r.knownOff.Add(-1)
		return false
	}
	return !r.log.Enabled(context.Background(), slog.LevelDebug)
}

// settle is b decided: a batch of undecided records (the known path) has
// its known records ended, as their duplicates would have, and the rest
// decided; nil when none is left to claim. It runs on the settler's
// goroutine (Router.Run), in poll order, while the claimer claims the
// polls before.
func (r *Router) settle(ctx context.Context, b *claimBatch) *claimBatch {
	if b == nil || b.undecided == nil {
		return b
	}
	recs := b.undecided
	look := make([]KnownRecord, len(recs))
	for i := range recs {
		kr := recs[i].kr
		look[i] = KnownRecord{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset, Digest: recs[i].digest}
	}
	known := make([]int32, len(recs))
	if err := r.known.Known(ctx, look, known); err != nil {
		// Only a shortcut: every record is decided and claimed.
		r.log.Info("ledger: the read of known records failed; the records are decided and claimed", "err", err)
		clear(known)
	}
	var (
		ended   []*record
		intents int64
		first   *kgo.Record // the first known record, for the decision log
		left    = recs[:0]
	)
	for i := range recs {
		if k := known[i]; k > 0 {
			if first == nil {
				first = recs[i].kr
			}
			ended = append(ended, recs[i].rec)
			intents += int64(k)
			continue
		}
		left = append(left, recs[i])
	}
	if 2*len(ended) < len(recs) {
		r.knownOff.Store(knownOffPolls)
	}
	if len(ended) > 0 {
		r.knownDuplicates(first, len(ended), intents, time.Now())
		r.commits.endAll(ended, true) // their memory goes back to the pools: not read after
	}
	// The poll loop resolved these records' schemas, but went on to
	// resolve the next polls' since, and the registry's cache may have let
	// some of these go (its bound): resolved again, and decided, in one
	// step (decideAll; a cache hit each, mostly).
	return r.decideAll(ctx, left)
}

// knownDuplicates counts a known batch's records and their intents as
// duplicates, and logs them in the decision log's sample: the first of
// each second at info, with how many duplicates were not logged since
// (as claimer.duplicate samples the claimed ones, on its own clock: the
// settler's), named by the first known record (a known record's workflow
// IDs are not known without deciding it). Only the settler calls it.
func (r *Router) knownDuplicates(first *kgo.Record, records int, intents int64, now time.Time) {
	r.m.intents.WithLabelValues(decide.VerdictDuplicate.String()).Add(float64(intents))
	r.m.known.Add(float64(records))
	if now.Sub(r.knownLoggedAt) >= time.Second {
		logDecision(r.log, slog.LevelInfo, "duplicate", decisionOf{topic: first.Topic, partition: first.Partition, offset: first.Offset},
			"sampled", true, "not_logged_since_last_sample", r.knownUnlogged, "ledger", "started_record", "records", records, "intents", intents)
		r.knownLoggedAt, r.knownUnlogged = now, intents-1
		return
	}
	r.knownUnlogged += intents
}

// knownLedgerOf is ledger as a KnownLedger and the print its router's
// records are written known under (knownPrint); nil when ledger is none
// or the router's records cannot be known (logged, with why).
func knownLedgerOf(ledger Ledger, cfg Config, log *slog.Logger) (KnownLedger, [32]byte) {
	kl, ok := ledger.(KnownLedger)
	if !ok {
		return nil, [32]byte{}
	}
	print, err := knownPrint(cfg)
	if err != nil {
		log.Info("records are not written known: a replay decides each record again", "why", err.Error())
		return nil, [32]byte{}
	}
	return kl, print
}

// settleLoop is the settler's goroutine (Router.Run, while the router
// writes known records): it settles the polls of polledQ in poll order,
// the undecided polls waiting behind one together (gatherUndecided), and
// passes what is left to claim to claimQ, until polledQ is closed; then
// it closes claimQ.
func (r *Router) settleLoop(ctx context.Context, polledQ <-chan *claimBatch, claimQ chan<- *claimBatch) {
	defer close(claimQ)
	var held *claimBatch
	for {
		b := held
		if b == nil {
			var ok bool
			if b, ok = <-polledQ; !ok {
				return
			}
		}
		held = nil
		if b.undecided != nil {
			b, held = gatherUndecided(b, polledQ)
		}
		if b = r.settle(ctx, b); b != nil { // nil: every record known
			claimQ <- b
		}
	}
}
