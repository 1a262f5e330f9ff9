package peer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
)

// Config is one Watermill replica.
type Config struct {
	// Brokers are the seed brokers. A proxy put here only sees the first
	// metadata request: sarama then dials the addresses the broker
	// advertises. To put a latency proxy in the path of every
	// connection, set Dial.
	Brokers []string
	Topic   string
	// Group is the consumer group; replicas share it.
	Group string
	// Temporal is a client bound to Namespace.
	Temporal  client.Client
	Namespace string
	// Routes say which workflows an event starts (one per matching
	// route), with their workflow type and task queue: the same table
	// dedup's router takes, so both start the same workflow IDs.
	Routes decide.Routes
	// EventID configures the decoder the event ID comes from; the zero
	// value is eventid.DefaultConfig().
	EventID *eventid.Config
	// Window is how long the deduplicator remembers an event ID
	// (Watermill's default is one minute).
	Window time.Duration
	// StartTimeout bounds one ExecuteWorkflow call (default 10s).
	StartTimeout time.Duration
	// Dial, when set, dials every broker connection (sarama's
	// Net.Proxy.Dialer): the hook for a latency proxy.
	Dial func(network, addr string) (net.Conn, error)
	// Log receives Watermill's and sarama's errors; nil discards them.
	Log *slog.Logger
	// OnFirst, if set, is called once per replica when its first message
	// enters the handler chain (before it is decoded): the start of a
	// measured window that leaves the group join out.
	OnFirst func()
	// OnHandled, if set, is called after each message the replica counts
	// as handled, with the total handled so far (over RunGroup's replicas,
	// its shared total). It runs on the handler's goroutine.
	OnHandled func(total int64)
}

// Validate names the first invalid field.
func (c Config) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("peer: Brokers: empty")
	case c.Topic == "":
		return errors.New("peer: Topic: empty")
	case c.Group == "":
		return errors.New("peer: Group: empty")
	case c.Temporal == nil:
		return errors.New("peer: Temporal: nil")
	case len(c.Routes) == 0:
		return errors.New("peer: Routes: empty")
	case c.Window < time.Millisecond:
		return fmt.Errorf("peer: Window: %s, want at least 1ms", c.Window)
	}
	return c.Routes.Validate()
}

// Result is what one replica (or, from RunGroup's Total, all of them) did.
type Result struct {
	// Handled counts messages acked by the router: started, already
	// started, dropped by the deduplicator or undecodable.
	Handled int64 `json:"handled"`
	// Deduplicated counts messages the deduplicator dropped.
	Deduplicated int64 `json:"deduplicated"`
	// TemporalCalls counts ExecuteWorkflow calls; NewStarts the ones that
	// started a workflow, AlreadyStarted the ones Temporal rejected as
	// already started (success for the handler), Errors the others
	// (the handler returned an error: the message is nacked).
	TemporalCalls  int64 `json:"temporal_calls"`
	NewStarts      int64 `json:"new_starts"`
	AlreadyStarted int64 `json:"already_started"`
	Errors         int64 `json:"errors"`
	// Undecodable counts messages without an event ID (acked, skipped).
	Undecodable int64 `json:"undecodable"`
	// Lost counts messages the deduplicator dropped after the handler had
	// failed for the same event ID and no start had succeeded since: the
	// redelivery of a failed message, dropped, so its workflow never
	// starts.
	Lost int64 `json:"lost"`
	// Wall is from Run's call to its return; HandlerP50 and HandlerP99
	// are the handler's time per message (deduplicator and starts),
	// milliseconds.
	Wall       time.Duration `json:"wall_ns"`
	HandlerP50 float64       `json:"handler_p50_ms"`
	HandlerP99 float64       `json:"handler_p99_ms"`
}

func (r *Result) add(o Result) {
	r.Handled += o.Handled
	r.Deduplicated += o.Deduplicated
	r.TemporalCalls += o.TemporalCalls
	r.NewStarts += o.NewStarts
	r.AlreadyStarted += o.AlreadyStarted
	r.Errors += o.Errors
	r.Undecodable += o.Undecodable
	r.Lost += o.Lost
	r.Wall = max(r.Wall, o.Wall)
}

// Run runs one replica until want messages were handled (want <= 0: until
// ctx is done) and returns what it did. Cancelling ctx is not an error.
func Run(ctx context.Context, cfg Config, want int) (Result, error) {
	var handled atomic.Int64
	res, _, err := run(ctx, cfg, &handled, int64(want))
	return res, err
}

// RunGroup runs replicas replicas of cfg concurrently in one consumer
// group (each its own process in effect: its own subscriber, router and
// in-memory deduplicator) until they handled want messages between them
// (want <= 0: until ctx is done). It returns each replica's result and
// their sum. The replicas join one after the other: on a backlog produced
// before the call, the first to join consumes alone until the group
// rebalances (within a second or two). To split a backlog between them,
// produce it once WaitGroupMembers says all have joined.
func RunGroup(ctx context.Context, cfg Config, replicas, want int) ([]Result, Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var handled atomic.Int64
	out := make([]Result, replicas)
	lats := make([][]time.Duration, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			out[i], lats[i], errs[i] = run(ctx, cfg, &handled, int64(want))
			if want > 0 && handled.Load() >= int64(want) {
				cancel()
			}
		})
	}
	wg.Wait()
	var total Result
	for _, r := range out {
		total.add(r)
	}
	all := slices.Concat(lats...)
	total.HandlerP50, total.HandlerP99 = quantile(all, 0.50), quantile(all, 0.99)
	return out, total, errors.Join(errs...)
}

// replica is one running Watermill job.
type replica struct {
	cfg     Config
	dec     *eventid.Decoder
	handled *atomic.Int64
	want    int64
	stop    context.CancelFunc
	res     Result
	mu      sync.Mutex
	lat     []time.Duration
	failed  map[string]bool // event IDs whose handler failed, not started since
	first   sync.Once
}

type ctxKey struct{}

// decoded is what the decoding middleware hands the handler, and whether
// the handler ran (the deduplicator did not drop the message).
type decoded struct {
	ev  eventid.Event
	ran bool
}

const eventIDField = "dedup_event_id"

func run(ctx context.Context, cfg Config, handled *atomic.Int64, want int64) (Result, []time.Duration, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, nil, err
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 10 * time.Second
	}
	ec := eventid.DefaultConfig()
	if cfg.EventID != nil {
		ec = *cfg.EventID
	}
	dec, err := eventid.NewDecoder(ec)
	if err != nil {
		return Result{}, nil, err
	}
	log := watermill.LoggerAdapter(watermill.NopLogger{})
	if cfg.Log != nil {
		log = watermill.NewSlogLoggerWithLevelMapping(cfg.Log, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug})
	}
	sc := kafka.DefaultSaramaSubscriberConfig()
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	if cfg.Dial != nil {
		sc.Net.Proxy.Enable = true
		sc.Net.Proxy.Dialer = dialFunc(cfg.Dial)
	}
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers:               cfg.Brokers,
		Unmarshaler:           kafka.DefaultMarshaler{},
		OverwriteSaramaConfig: sc,
		ConsumerGroup:         cfg.Group,
	}, log)
	if err != nil {
		return Result{}, nil, fmt.Errorf("creating the subscriber: %w", err)
	}
	defer func() { _ = sub.Close() }()
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, log)
	if err != nil {
		return Result{}, nil, err
	}
	keys, err := middleware.NewMapExpiringKeyRepository(cfg.Window)
	if err != nil {
		return Result{}, nil, err
	}
	dedupe := &middleware.Deduplicator{KeyFactory: middleware.NewMessageHasherFromMetadataField(eventIDField), Repository: keys}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &replica{cfg: cfg, dec: dec, handled: handled, want: want, stop: cancel, failed: map[string]bool{}}
	router.AddMiddleware(r.measure, dedupe.Middleware)
	router.AddConsumerHandler("start-workflows", cfg.Topic, sub, r.handle)
	began := time.Now()
	go func() {
		<-rctx.Done()
		_ = router.Close()
	}()
	err = router.Run(rctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Wall = time.Since(began)
	r.res.HandlerP50, r.res.HandlerP99 = quantile(r.lat, 0.50), quantile(r.lat, 0.99)
	if err != nil {
		return r.res, r.lat, fmt.Errorf("running the watermill router: %w", err)
	}
	return r.res, r.lat, nil
}

// measure decodes the event ID into the metadata the deduplicator reads,
// times the rest of the chain and counts what it did.
func (r *replica) measure(next message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		if r.cfg.OnFirst != nil {
			r.first.Do(r.cfg.OnFirst)
		}
		began := time.Now()
		ev, err := r.dec.Decode(r.record(msg))
		if err != nil || ev.ID == "" {
			r.mu.Lock()
			r.res.Undecodable++
			r.res.Handled++
			r.mu.Unlock()
			r.count()
			return nil, nil
		}
		d := &decoded{ev: ev}
		msg.Metadata.Set(eventIDField, ev.ID)
		msg.SetContext(context.WithValue(msg.Context(), ctxKey{}, d))
		out, err := next(msg)
		r.mu.Lock()
		r.lat = append(r.lat, time.Since(began))
		if err == nil {
			r.res.Handled++
			if !d.ran {
				r.res.Deduplicated++
				if r.failed[ev.ID] {
					r.res.Lost++
					delete(r.failed, ev.ID)
				}
			}
		}
		r.mu.Unlock()
		if err == nil {
			r.count()
		}
		return out, err
	}
}

func (r *replica) count() {
	n := r.handled.Add(1)
	if r.cfg.OnHandled != nil {
		r.cfg.OnHandled(n)
	}
	if r.want > 0 && n >= r.want {
		r.stop()
	}
}

// record is the Kafka record the message came from, as the decoder reads
// it (headers are Watermill's metadata: their order is lost, which the
// decoder does not depend on).
func (r *replica) record(msg *message.Message) eventid.Record {
	ctx := msg.Context()
	rec := eventid.Record{Topic: r.cfg.Topic, Value: msg.Payload}
	rec.Partition, _ = kafka.MessagePartitionFromCtx(ctx)
	rec.Offset, _ = kafka.MessagePartitionOffsetFromCtx(ctx)
	rec.Key, _ = kafka.MessageKeyFromCtx(ctx)
	for k, v := range msg.Metadata {
		if k != eventIDField {
			rec.Headers = append(rec.Headers, eventid.Header{Key: k, Value: []byte(v)})
		}
	}
	return rec
}

// handle starts the event's workflows, one per matching route.
func (r *replica) handle(msg *message.Message) error {
	d, _ := msg.Context().Value(ctxKey{}).(*decoded)
	if d == nil {
		return errors.New("message without a decoded event")
	}
	d.ran = true
	for _, rt := range r.cfg.Routes.Match(&d.ev) {
		wid := decide.WorkflowID(rt.ID, d.ev.ID)
		req := decide.NewStartRequest(rt, &d.ev, wid)
		err := r.start(msg.Context(), wid, rt, req)
		r.mu.Lock()
		r.res.TemporalCalls++
		var already *serviceerror.WorkflowExecutionAlreadyStarted
		switch {
		case err == nil:
			r.res.NewStarts++
			delete(r.failed, d.ev.ID)
		case errors.As(err, &already):
			r.res.AlreadyStarted++
			delete(r.failed, d.ev.ID)
		default:
			r.res.Errors++
			r.failed[d.ev.ID] = true
		}
		r.mu.Unlock()
		if err != nil && !errors.As(err, &already) {
			return fmt.Errorf("starting workflow %s: %w", wid, err)
		}
	}
	return nil
}

func (r *replica) start(ctx context.Context, wid string, rt *decide.Route, req decide.StartRequest) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StartTimeout)
	defer cancel()
	_, err := r.cfg.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                    wid,
		TaskQueue:             rt.TaskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		// Without it the SDK answers a running workflow's ID with its
		// run, not an error, and the rejection could not be counted.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
	}, rt.WorkflowType, req.Input)
	return err
}

// dialFunc is a sarama proxy dialer made of a function.
type dialFunc func(network, addr string) (net.Conn, error)

func (f dialFunc) Dial(network, addr string) (net.Conn, error) { return f(network, addr) }

func quantile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(q*float64(len(s))))]) / 1e6
}
