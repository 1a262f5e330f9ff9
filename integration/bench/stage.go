package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/pprof"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/dedupio/dedup/integration/bench/peer"
	"github.com/dedupio/dedup/sink/starter"
)

// The stages a measured process can run (`dedup-bench stage NAME`).
const (
	StageRawStarts       = "raw-starts"       // the router's starter alone: unique start requests at its concurrency
	StageSDKStarts       = "sdk-starts"       // the same starts through the SDK's client.ExecuteWorkflow (sdkstart.go)
	StageRawClaims       = "raw-claims"       // the router's claim statement alone, new rows then duplicate rows
	StageRawConsume      = "raw-consume"      // a group consumer that commits each poll and does nothing else
	StageBacklog         = "backlog"          // the router over a backlog at -dup
	StageLive            = "live"             // the router on live traffic at -dup, for latency
	StageReplay          = "replay"           // the router over an all-duplicate backlog, then the claim alone over its IDs
	StageNaiveUnique     = "naive-unique"     // the naive consumer, unique-heavy
	StageNaiveReplay     = "naive-replay"     // the naive consumer, all duplicates
	StageLedgerGrowth    = "ledger-growth"    // the claim statement as the ledger grows
	StageRSS             = "rss"              // a `dedup run` process over RSSBacklog records, its peak RSS
	StageWatermill       = "watermill"        // the Watermill peer (integration/bench/peer) over the backlog at -dup
	StageWatermillReplay = "watermill-replay" // the Watermill peer over an all-duplicate backlog whose workflows Temporal has started
	StageGuarantees      = "guarantees"       // peer.Guarantees: restart, retention, two replicas, outage; Watermill and dedup
	StageLedgerScale     = "ledger-scale"     // claims at ledger sizes ScaleSizes (on demand)
	StageRetention       = "retention"        // ledger.Purge vs dropping a day partition, RetentionRows rows (on demand)
	StageSRAvro          = "sr-avro"          // the router over CostRecords Avro values through a Schema Registry stand-in, at -dup (costs.go)
	StageSRJSON          = "sr-json"          // the router over the same logical records as plain JSON, no registry, at -dup
	StageTracingOff      = "tracing-off"      // the router over CostRecords records of the backlog's workload at -dup, tracing off
	StageTracingOn       = "tracing-on"       // the same with tracing on, every trace sampled, spans batched then discarded
)

// Stages lists every stage name.
var Stages = []string{StageRawStarts, StageSDKStarts, StageRawClaims, StageRawConsume, StageBacklog, StageLive, StageReplay,
	StageNaiveUnique, StageNaiveReplay, StageLedgerGrowth, StageRSS, StageWatermill, StageWatermillReplay, StageGuarantees,
	StageLedgerScale, StageRetention, StageSRAvro, StageSRJSON, StageTracingOff, StageTracingOn}

// StageResult is what a stage process prints (JSON on stdout). One of
// Rate, Claims, Router, Ledger, RSS is set, by stage.
type StageResult struct {
	Stage  string        `json:"stage"`
	Dup    float64       `json:"dup_ratio"`
	Rate   *Rate         `json:"rate,omitempty"`
	Claims *ClaimRates   `json:"claims,omitempty"`
	Router *RouterResult `json:"router,omitempty"`
	// ReplayRawClaim is the replay stage's claim statement alone over its
	// own IDs, right after the router.
	ReplayRawClaim *Rate         `json:"replay_raw_claim,omitempty"`
	Ledger         []LedgerPoint `json:"ledger,omitempty"`
	RSS            *RSSResult    `json:"rss,omitempty"`
	// Guarantees is the guarantees stage's.
	Guarantees *peer.GuaranteesResult `json:"guarantees,omitempty"`
	Scale      []ScalePoint           `json:"ledger_scale,omitempty"`
	Retention  *RetentionResult       `json:"retention,omitempty"`
	// Workflows is how many workflows the stage started (Settle).
	Workflows int64 `json:"workflows"`
	// Affinity is `taskset -cp` of the stage process.
	Affinity string `json:"affinity"`
}

// StageConfig is what one stage process runs.
type StageConfig struct {
	Name       string
	Dup        float64
	Infra      *Infra
	Params     Params
	CPUProfile string // file for this process's CPU profile; "" for none
	Trace      bool   // with CPUProfile: the first window's execution trace beside it (StartStageTrace)
}

// RunStage runs one stage in this process, against the infrastructure, and
// returns its result.
func RunStage(ctx context.Context, cfg StageConfig, log *slog.Logger) (res StageResult, err error) {
	res = StageResult{Stage: cfg.Name, Dup: cfg.Dup, Affinity: SelfAffinity()}
	// Every stage's Temporal client is the same: the router's starter,
	// the bare SDK start it is compared with, the naive consumer and the
	// Watermill peer differ in what they do, not in their transport.
	tc, err := client.Dial(client.Options{HostPort: cfg.Infra.Temporal, Namespace: cfg.Infra.Namespace,
		Logger:            tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		ConnectionOptions: client.ConnectionOptions{GrpcCompression: starter.Compression(cfg.Params.Compression)}})
	if err != nil {
		return res, fmt.Errorf("dialling Temporal at %s: %w", cfg.Infra.Temporal, err)
	}
	defer tc.Close()
	e, err := NewEnv(cfg.Infra, tc, cfg.Params, log)
	if err != nil {
		return res, err
	}
	defer e.Close()
	if cfg.CPUProfile != "" {
		runtime.MemProfileRate = profileAllocsEvery
		done, perr := StartStageProfile(cfg.CPUProfile)
		if perr != nil {
			return res, perr
		}
		if cfg.Trace {
			StartStageTrace()
		}
		defer func() {
			if perr := done(); err == nil && perr != nil {
				err = fmt.Errorf("writing the CPU profile: %w", perr)
			}
		}()
	}
	// A label, so that a profile can be told from the infrastructure's
	// (the profile itself is the stage's first measured window:
	// windowProfile).
	pprof.Do(ctx, pprof.Labels("stage", cfg.Name), func(ctx context.Context) { err = e.dispatch(ctx, cfg, &res) })
	res.Workflows = e.Workflows()
	if derr := e.DropTopics(context.WithoutCancel(ctx)); err == nil && derr != nil {
		err = fmt.Errorf("dropping the stage's topics: %w", derr)
	}
	return res, err
}

func (e *Env) dispatch(ctx context.Context, cfg StageConfig, res *StageResult) error {
	var err error
	router := func(x RouterResult, err error) error {
		res.Router = &x
		return err
	}
	switch cfg.Name {
	case StageRawStarts:
		var r Rate
		r, err = e.RawStarts(ctx)
		res.Rate = &r
	case StageSDKStarts:
		var r Rate
		r, err = e.SDKStarts(ctx)
		res.Rate = &r
	case StageRawConsume:
		var r Rate
		r, err = e.RawConsume(ctx, e.P.ReplayN)
		res.Rate = &r
	case StageRawClaims:
		var c ClaimRates
		c, err = e.RawClaims(ctx)
		res.Claims = &c
	case StageBacklog:
		err = router(e.Backlog(ctx, cfg.Dup))
	case StageLive:
		err = router(e.Live(ctx, cfg.Dup))
	case StageReplay:
		var x RouterResult
		var raw Rate
		x, raw, err = e.Replay(ctx)
		res.Router, res.ReplayRawClaim = &x, &raw
	case StageNaiveUnique:
		err = router(e.Naive(ctx, UniqueRecords(e.P, e.P.NaiveRecords), nil))
	case StageNaiveReplay:
		err = router(e.NaiveReplay(ctx))
	case StageLedgerGrowth:
		res.Ledger, err = e.LedgerGrowth(ctx)
	case StageRSS:
		var r RSSResult
		r, err = e.RSS(ctx)
		res.RSS = &r
	case StageWatermill:
		err = router(e.WatermillBacklog(ctx, cfg.Dup))
	case StageWatermillReplay:
		err = router(e.WatermillReplay(ctx))
	case StageGuarantees:
		var g peer.GuaranteesResult
		g, err = e.Guarantees(ctx)
		res.Guarantees = &g
	case StageLedgerScale:
		res.Scale, err = e.LedgerScale(ctx, e.P.ScaleSizes, e.P.ScaleClaims, e.P.ScaleOrdered)
	case StageRetention:
		var r RetentionResult
		r, err = e.RetentionCost(ctx, e.P.RetentionRows, e.P.RetentionDays)
		res.Retention = &r
	case StageSRAvro, StageSRJSON:
		err = router(e.SchemaRegistryBacklog(ctx, cfg.Dup, cfg.Name == StageSRAvro))
	case StageTracingOff, StageTracingOn:
		err = router(e.TracedBacklog(ctx, cfg.Dup, cfg.Name == StageTracingOn))
	default:
		return fmt.Errorf("unknown stage %q (stages: %v)", cfg.Name, Stages)
	}
	return err
}
