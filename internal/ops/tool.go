package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/dial"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/replay"
	"github.com/dedupio/dedup/sink/ledger"
)

// Tool holds one command's config and its connections, each opened on
// first use and closed by Close. They are built as dedup run builds its
// own (processor.Config.ClientOpts, app.DialToolTemporal, ledger.Open): the same TLS,
// SASL and credentials apply.
type Tool struct {
	cfg config.Config
	log *slog.Logger

	kopts []kgo.Opt
	kcl   *kgo.Client
	adm   *kadm.Client

	led *ledger.Postgres

	tcOnce sync.Once
	tc     client.Client
	tcErr  error

	decider *decide.Decider

	// idle is how long a read waits for a record of a partition before it
	// ends the partition (replay.Reader.Idle; its default when 0).
	idle time.Duration
}

func newTool(cfg config.Config, log *slog.Logger) *Tool {
	return &Tool{cfg: cfg, log: log}
}

// Close closes what was opened.
func (t *Tool) Close() {
	if t.kcl != nil {
		t.kcl.Close()
	}
	if t.led != nil {
		t.led.Close()
	}
	if t.tc != nil {
		t.tc.Close()
	}
}

// kafka is the admin client (kadm) over a client built with dial.go's
// options.
func (t *Tool) kafka() (*kadm.Client, error) {
	if t.adm != nil {
		return t.adm, nil
	}
	opts, err := t.cfg.Kafka.ClientOpts()
	if err != nil {
		return nil, err
	}
	t.kopts = opts
	if t.kcl, err = kgo.NewClient(opts...); err != nil {
		return nil, fmt.Errorf("creating kafka client: %w", err)
	}
	t.adm = kadm.NewClient(t.kcl)
	return t.adm, nil
}

// reader reads the spans with a client of its own (outside any group:
// nothing is committed), as the router reads them (replay.Reader: under
// kafka.isolation_level, up to the last stable offset at most).
func (t *Tool) reader(spans map[string]map[int32]replay.Span) (*replay.Reader, error) {
	if _, err := t.kafka(); err != nil {
		return nil, err
	}
	rd, err := replay.NewReader(append(slices.Clone(t.kopts), t.cfg.Kafka.FetchLimits()...), spans)
	if err != nil {
		return nil, err
	}
	rd.Idle = t.idle
	return rd, nil
}

// ledger is the ledger (ledger.Open: the pool dials on first use).
func (t *Tool) ledger(ctx context.Context) (*ledger.Postgres, error) {
	if t.led != nil {
		return t.led, nil
	}
	led, err := ledger.Open(ctx, t.cfg.Postgres)
	if err != nil {
		return nil, err
	}
	t.led = led
	return led, nil
}

// temporal dials Temporal once; a Temporal that does not answer within 10
// seconds is an error the callers report beside what the other sources
// said.
func (t *Tool) temporal(ctx context.Context) (client.Client, error) {
	t.tcOnce.Do(func() {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		t.tc, t.tcErr = dial.DialToolTemporal(dctx, t.cfg, t.log.With("component", "temporal-sdk"))
	})
	return t.tc, t.tcErr
}

// namespace is the Temporal namespace of a workflow ID: its route's, else
// temporal.namespace (a route no longer in the config).
func (t *Tool) namespace(workflowID string) string {
	if rt := t.cfg.Routes.RouteOf(workflowID); rt != nil && rt.Namespace != "" {
		return rt.Namespace
	}
	return t.cfg.Temporal.Namespace
}

// decide is the router's decision for kr (decide.Decider), its
// schema resolved first as the router does (a registry that does not
// answer is an error here, not an undecodable record).
func (t *Tool) decide(ctx context.Context, kr *kgo.Record) (decide.Decision, error) {
	if t.decider == nil {
		d, err := processor.NewDecider(t.cfg.Kafka)
		if err != nil {
			return decide.Decision{}, err
		}
		t.decider = d
	}
	if err := t.decider.Resolve(ctx, []*kgo.Record{kr}); err != nil {
		return decide.Decision{}, err
	}
	return t.decider.Decide(kr), nil
}

// errs collects the errors of the sources a command asked, so that it can
// answer with what the others said.
type errs []string

func (e *errs) add(what string, err error) {
	if err != nil {
		if msg := fmt.Sprintf("%s: %v", what, err); !slices.Contains(*e, msg) {
			*e = append(*e, msg)
		}
	}
}

// redacted is e with every value a ${VAR} of the config gave taken out
// of each (config.Config.RedactText): the answer prints them, as the
// command's error, which is redacted too.
func (t *Tool) redacted(e errs) []string {
	if e == nil {
		return nil
	}
	out := make([]string, len(e))
	for i, s := range e {
		out[i] = t.cfg.RedactText(s)
	}
	return out
}

func (e errs) err() error {
	if len(e) == 0 {
		return nil
	}
	return errors.New("the answer is incomplete: " + joinSemi(e))
}

func joinSemi(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += "; "
		}
		out += x
	}
	return out
}
