package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/dedupio/dedup/connect/tracing"
	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/internal/testsupport/srstandin"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
)

// This file is the cost stages: what reading Avro through a Schema
// Registry and tracing cost the router, each measured beside the same
// router without it, on the same workload, in the same repetition, so
// that each is a ratio of two figures taken under the same conditions.
//
//   - sr-avro and sr-json: CostRecords records as Avro values in the
//     Confluent wire format, read through a Schema Registry stand-in
//     (internal/testsupport/srstandin, in the stage process: the router
//     asks it once, for the one schema ID, and caches the schema), and the
//     same logical records as plain JSON on a router without a registry
//     (what a JSON topic costs today). -dup 1 is the replay's workload with
//     every workflow in the ledger as started.
//   - tracing-off and tracing-on: the router over CostRecords records of
//     the backlog's workload, without tracing, and with the router's and
//     its starter's tracing on, every trace sampled, spans handed to the
//     batching span processor dedup's OTLP exporter uses, whose exporter
//     here discards them: span creation, attributes, the W3C context
//     injected into each start, the batcher; not OTLP's encoding or its
//     network.

// CostRuns are one repetition's cost stages (Rep.Costs; nil when
// -cost-records is 0).
type CostRuns struct {
	AvroUnique RouterResult `json:"avro_unique_heavy"`
	JSONUnique RouterResult `json:"json_unique_heavy"`
	AvroReplay RouterResult `json:"avro_replay"`
	JSONReplay RouterResult `json:"json_replay"`
	TracingOff RouterResult `json:"tracing_off_unique_heavy"`
	TracingOn  RouterResult `json:"tracing_on_unique_heavy"`
}

// costAvroSchema is the workload's plain event as an Avro record: the
// logical JSON srdecode reads of it is the plain JSON sr-json produces
// (a union of null and string is the string or null).
const costAvroSchema = `{"type":"record","name":"Event","namespace":"bench","fields":[
 {"name":"id","type":["null","string"],"default":null},{"name":"type","type":"string"},{"name":"source","type":"string"},
 {"name":"n","type":"long"},{"name":"customer","type":"string"},{"name":"amount","type":"double"},{"name":"pad","type":"string"}]}`

// costEvent is a workload record's logical event, in costAvroSchema's
// field order.
type costEvent struct {
	ID       *string `json:"id" avro:"id"`
	Type     string  `json:"type" avro:"type"`
	Source   string  `json:"source" avro:"source"`
	N        int64   `json:"n" avro:"n"`
	Customer string  `json:"customer" avro:"customer"`
	Amount   float64 `json:"amount" avro:"amount"`
	Pad      string  `json:"pad" avro:"pad"`
}

// costEventOf reads the workload's record (CloudEvents structured or
// binary, or plain JSON with or without an id) as its logical event.
func costEventOf(kr *kgo.Record) (costEvent, error) {
	var ev costEvent
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(kr.Value, &fields); err != nil {
		return ev, fmt.Errorf("reading a workload record: %w", err)
	}
	str := func(raw json.RawMessage) string {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s
	}
	data := fields
	switch {
	case len(kr.Headers) > 0: // binary mode: the attributes in headers
		for _, h := range kr.Headers {
			switch h.Key {
			case "ce_id":
				id := string(h.Value)
				ev.ID = &id
			case "ce_type":
				ev.Type = string(h.Value)
			case "ce_source":
				ev.Source = string(h.Value)
			}
		}
	case fields["specversion"] != nil: // structured mode
		id := str(fields["id"])
		ev.ID, ev.Type, ev.Source = &id, str(fields["type"]), str(fields["source"])
		data = nil
		if err := json.Unmarshal(fields["data"], &data); err != nil {
			return ev, fmt.Errorf("reading a workload record's data: %w", err)
		}
	default: // plain
		if raw, ok := fields["id"]; ok {
			id := str(raw)
			ev.ID = &id
		}
		ev.Type, ev.Source = str(fields["type"]), str(fields["source"])
	}
	if err := json.Unmarshal(data["n"], &ev.N); err != nil {
		return ev, fmt.Errorf("reading a workload record's n: %w", err)
	}
	if err := json.Unmarshal(data["amount"], &ev.Amount); err != nil {
		return ev, fmt.Errorf("reading a workload record's amount: %w", err)
	}
	ev.Customer, ev.Pad = str(data["customer"]), str(data["pad"])
	return ev, nil
}

// costWorkload is a fresh topic and CostRecords records for it: at dup
// like the backlog's, or (dup 1) the replay's workload.
func (e *Env) costWorkload(ctx context.Context, dup float64) (string, []*kgo.Record, error) {
	topic, err := e.topic(ctx)
	if err != nil {
		return "", nil, err
	}
	spec := workload.Spec{Topic: topic, Partitions: e.P.Partitions, Records: e.P.CostRecords, DupRatio: dup,
		CrossPartition: 0.1, Seed: uint64(dup*1000) + 3, PayloadBytes: e.P.PayloadBytes, IDPrefix: topic + "-"}
	if dup >= 1 {
		spec.DupRatio, spec.Seed = 0.3, 77
	}
	return topic, workload.Generate(spec).Records, nil
}

// SchemaRegistryBacklog runs the router over CostRecords records at dup
// (1: all duplicates, their workflows in the ledger as started), as Avro
// values through a Schema Registry stand-in, or (asAvro false) as the
// same logical records in plain JSON on a router without a registry.
func (e *Env) SchemaRegistryBacklog(ctx context.Context, dup float64, asAvro bool) (RouterResult, error) {
	topic, recs, err := e.costWorkload(ctx, dup)
	if err != nil {
		return RouterResult{}, err
	}
	var configure func(*processor.Config)
	encode := jsonCostValue
	if asAvro {
		stand := srstandin.New()
		defer stand.Close()
		if encode, err = avroCostValues(stand, topic); err != nil {
			return RouterResult{}, err
		}
		configure = func(c *processor.Config) { c.SchemaRegistry.URL = stand.URL() }
	}
	if err := encodeCostRecords(recs, encode); err != nil {
		return RouterResult{}, err
	}
	intents, err := e.decidedIntents(ctx, topic, configure, recs)
	if err != nil {
		return RouterResult{}, err
	}
	var pre []decide.Intent
	if dup >= 1 {
		pre = intents
	}
	res, _, err := e.runRouter(ctx, routerRun{topic: topic, recs: recs, prefill: pre, configure: configure}, nil)
	res.DupRatio = dup
	if err == nil && dup >= 1 && res.Workflows.N > 0 {
		err = fmt.Errorf("the all-duplicate run started %d workflows: its ledger was not prefilled with the router's IDs", res.Workflows.N)
	}
	return res, err
}

// encodeCostRecords rewrites each workload record as its logical event
// in plain form, its value encoded by encode, without headers.
func encodeCostRecords(recs []*kgo.Record, encode func(costEvent) ([]byte, error)) error {
	for _, kr := range recs {
		ev, err := costEventOf(kr)
		if err != nil {
			return err
		}
		if kr.Value, err = encode(ev); err != nil {
			return fmt.Errorf("encoding a workload record: %w", err)
		}
		kr.Headers = nil
	}
	return nil
}

func jsonCostValue(ev costEvent) ([]byte, error) { return json.Marshal(ev) }

// avroCostValues registers costAvroSchema for topic's values with the
// registry and returns the encoder of its values in the Confluent wire
// format (a zero byte, the schema ID, the Avro binary).
func avroCostValues(stand *srstandin.Registry, topic string) (func(costEvent) ([]byte, error), error) {
	id, _ := stand.Register(topic+"-value", sr.Schema{Schema: costAvroSchema})
	schema, err := avro.Parse(costAvroSchema)
	if err != nil {
		return nil, fmt.Errorf("parsing the Avro schema: %w", err)
	}
	return func(ev costEvent) ([]byte, error) {
		var h sr.ConfluentHeader
		v, err := h.AppendEncode(nil, id, nil)
		if err != nil {
			return nil, err
		}
		b, err := avro.Marshal(schema, ev)
		return append(v, b...), err
	}, nil
}

// decidedIntents are the intents the router's own decider (configured as
// the run's router) makes of recs, one per workflow ID; a record it would
// dead-letter is an error: the cost stages compare records that decode.
func (e *Env) decidedIntents(ctx context.Context, topic string, configure func(*processor.Config), recs []*kgo.Record) ([]decide.Intent, error) {
	cfg := e.routerConfig(topic)
	if configure != nil {
		configure(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("configuring the router: %w", err)
	}
	d, err := processor.NewDecider(cfg)
	if err != nil {
		return nil, err
	}
	if d.ReadsValues() {
		if err := d.Resolve(ctx, recs); err != nil {
			return nil, fmt.Errorf("resolving the workload's schemas: %w", err)
		}
	}
	seen := map[string]bool{}
	var out []decide.Intent
	for _, kr := range recs {
		dec := d.Decide(kr)
		if dec.DeadLetter != "" {
			return nil, fmt.Errorf("the router would dead-letter a workload record (%s): %w", dec.DeadLetter, dec.Err)
		}
		for _, in := range dec.Intents {
			if !seen[in.WorkflowID] {
				seen[in.WorkflowID] = true
				out = append(out, in)
			}
		}
	}
	return out, nil
}

// TracedBacklog runs the router over CostRecords records of the
// backlog's workload at dup, with tracing on (every trace sampled, the
// spans batched as the OTLP exporter's are, then discarded) or off.
func (e *Env) TracedBacklog(ctx context.Context, dup float64, on bool) (RouterResult, error) {
	topic, recs, err := e.costWorkload(ctx, dup)
	if err != nil {
		return RouterResult{}, err
	}
	var pre []decide.Intent
	if dup >= 1 {
		if pre, err = workflowIDs(recs); err != nil {
			return RouterResult{}, err
		}
	}
	var tr *tracing.Tracing
	exp := &discardExporter{}
	if on {
		always := 1.0
		tr = tracing.NewWith(tracing.Config{Exporter: tracing.ExporterOTLP, SampleRatio: &always}, "dedup-bench", sdktrace.WithBatcher(exp))
	}
	res, _, err := e.runRouter(ctx, routerRun{topic: topic, recs: recs, prefill: pre, tracing: tr}, nil)
	res.DupRatio = dup
	if serr := tr.Shutdown(context.WithoutCancel(ctx)); err == nil && serr != nil {
		err = serr
	}
	res.Spans = exp.spans.Load()
	if err == nil && on && res.Spans == 0 {
		err = fmt.Errorf("tracing was on and the router made no span")
	}
	return res, err
}

// discardExporter counts the spans it is given and drops them.
type discardExporter struct{ spans atomic.Int64 }

func (x *discardExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	x.spans.Add(int64(len(spans)))
	return nil
}

func (x *discardExporter) Shutdown(context.Context) error { return nil }

// costRatioDefs are the cost stages' rows of the report (Report.Ratios):
// figures, no targets (issue #42 asks for the figures; "no measurable
// cost when off" holds by construction: tracing off is a nil tracer).
func costRatioDefs() []ratioDef {
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	of := func(f func(*CostRuns) float64) func(Rep) float64 {
		return func(x Rep) float64 {
			if x.Costs == nil {
				return 0
			}
			return f(x.Costs)
		}
	}
	return []ratioDef{
		{needs: []string{StageSRJSON, StageSRAvro}, name: "router CPU per record, Avro through the Schema Registry / the same records as JSON (unique-heavy)",
			of: of(func(c *CostRuns) float64 { return div(c.AvroUnique.CPUPerRecord(), c.JSONUnique.CPUPerRecord()) })},
		{needs: []string{StageSRJSON, StageSRAvro}, name: "router CPU per record, Avro through the Schema Registry / the same records as JSON (all-duplicate replay)",
			of: of(func(c *CostRuns) float64 { return div(c.AvroReplay.CPUPerRecord(), c.JSONReplay.CPUPerRecord()) })},
		{needs: []string{StageSRJSON, StageSRAvro}, name: "router CPU per record, µs: Avro (unique-heavy)", of: of(func(c *CostRuns) float64 { return c.AvroUnique.CPUPerRecord() })},
		{needs: []string{StageSRJSON, StageSRAvro}, name: "router CPU per record, µs: JSON (unique-heavy)", of: of(func(c *CostRuns) float64 { return c.JSONUnique.CPUPerRecord() })},
		{needs: []string{StageSRJSON, StageSRAvro}, name: "router CPU per record, µs: Avro (all-duplicate replay)", of: of(func(c *CostRuns) float64 { return c.AvroReplay.CPUPerRecord() })},
		{needs: []string{StageSRJSON, StageSRAvro}, name: "router CPU per record, µs: JSON (all-duplicate replay)", of: of(func(c *CostRuns) float64 { return c.JSONReplay.CPUPerRecord() })},
		{needs: []string{StageTracingOff, StageTracingOn}, name: "router CPU per started workflow, tracing on (every trace sampled) / off (unique-heavy)",
			of: of(func(c *CostRuns) float64 { return div(c.TracingOn.CPUPerWorkflow(), c.TracingOff.CPUPerWorkflow()) })},
		{needs: []string{StageTracingOff, StageTracingOn}, name: "router CPU per workflow, µs: tracing off (unique-heavy)", of: of(func(c *CostRuns) float64 { return c.TracingOff.CPUPerWorkflow() })},
		{needs: []string{StageTracingOff, StageTracingOn}, name: "router CPU per workflow, µs: tracing on (unique-heavy)", of: of(func(c *CostRuns) float64 { return c.TracingOn.CPUPerWorkflow() })},
		{needs: []string{StageTracingOff, StageTracingOn}, name: "spans per record, tracing on (unique-heavy)",
			of: of(func(c *CostRuns) float64 { return div(float64(c.TracingOn.Spans), float64(c.TracingOn.Records.N)) })},
	}
}

// costsMarkdown is a profile's table of the cost stages ("" when they
// did not run).
func (r *Report) costsMarkdown(pr Profile) string {
	if r.Params.CostRecords == 0 || !pr.ran(StageSRJSON) && !pr.ran(StageTracingOff) {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nCost stages (%d records each; Avro through a Schema Registry stand-in against the same records as JSON, tracing on against off):\n\n", r.Params.CostRecords)
	b.WriteString("| stage | records/s | workflows started/s | CPU µs / record | CPU µs / workflow | spans / record | infra core busy % |\n|---|---|---|---|---|---|---|\n")
	for _, s := range []struct {
		label, stage string
		of           func(*CostRuns) RouterResult
	}{
		{"JSON, unique-heavy", StageSRJSON, func(c *CostRuns) RouterResult { return c.JSONUnique }},
		{"Avro through the registry, unique-heavy", StageSRAvro, func(c *CostRuns) RouterResult { return c.AvroUnique }},
		{"JSON, all-duplicate replay", StageSRJSON, func(c *CostRuns) RouterResult { return c.JSONReplay }},
		{"Avro through the registry, all-duplicate replay", StageSRAvro, func(c *CostRuns) RouterResult { return c.AvroReplay }},
		{"tracing off, unique-heavy", StageTracingOff, func(c *CostRuns) RouterResult { return c.TracingOff }},
		{"tracing on (every trace sampled), unique-heavy", StageTracingOn, func(c *CostRuns) RouterResult { return c.TracingOn }},
	} {
		if !pr.ran(s.stage) {
			continue
		}
		f := func(g func(RouterResult) float64) Spread {
			return pr.over(func(x Rep) float64 {
				if x.Costs == nil {
					return 0
				}
				return g(s.of(x.Costs))
			})
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", s.label,
			f(func(x RouterResult) float64 { return x.Records.PerSec }), f(func(x RouterResult) float64 { return x.Workflows.PerSec }),
			f(RouterResult.CPUPerRecord), f(RouterResult.CPUPerWorkflow),
			f(func(x RouterResult) float64 {
				if x.Records.N == 0 {
					return 0
				}
				return float64(x.Spans) / float64(x.Records.N)
			}),
			f(func(x RouterResult) float64 { return 100 * x.InfraBusy }))
	}
	return b.String()
}
