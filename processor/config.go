package processor

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/connect/clienttls"
	"github.com/dedupio/dedup/connect/dialguard"
	"github.com/dedupio/dedup/connect/kafkasasl"
	"github.com/dedupio/dedup/connect/schemaregistry"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/processor/tenantsig"
)

// Config is the router's configuration. Start from DefaultConfig.
type Config struct {
	Brokers []string `yaml:"brokers"`
	// Group is the consumer group: every replica of one deployment shares it.
	Group  string   `yaml:"group"`
	Topics []string `yaml:"topics"`
	// ResetOffset is where a partition starts when the group has no
	// committed offset for it, or when its committed offset has fallen out
	// of retention: "earliest" (nothing skipped; the ledger absorbs
	// replays) or "latest" (skip the backlog). Required: there is no silent
	// default for losing data.
	ResetOffset string `yaml:"reset_offset"`
	// IsolationLevel is what every consumer of dedup reads of a topic that
	// transactional producers write: "read_committed" (the default: records
	// of aborted transactions, and of transactions still open, are never
	// read, claimed or started) or "read_uncommitted" (every record as soon
	// as it is written, aborted ones included; only for topics no
	// transactional producer writes, or when aborted records must count).
	IsolationLevel string `yaml:"isolation_level"`
	// SessionTimeout is how long the group waits for a silent replica before
	// giving its partitions away. Shorter fails over faster; too short makes
	// GC pauses and slow networks cause rebalances.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// RebalanceTimeout is how long the group waits, during a rebalance, for
	// members to rejoin before dropping them: a replica that died mid
	// rebalance holds every partition still for this long.
	RebalanceTimeout time.Duration `yaml:"rebalance_timeout"`

	// MaxPollRecords is one poll batch: one ledger claim (a claimer that is
	// behind claims the two polls waiting for it in one). Larger batches
	// amortise the round trip; smaller ones start the first workflow sooner.
	MaxPollRecords int `yaml:"max_poll_records"`
	// MaxInFlight bounds polled-but-unfinished records (memory, and how
	// much is redelivered after a crash). Polling stops while it is
	// reached; it may be exceeded by one poll batch, and while partitions
	// wait for the ledger's fence (not fetched meanwhile), by the records
	// each held when it began to wait, which it does not count
	// (refused.go).
	MaxInFlight int `yaml:"max_in_flight"`
	// FetchMaxBytes bounds what the Kafka client buffers per fetch (and so,
	// with one fetch in flight per broker, its consuming memory). It must
	// be at least the largest record the topics hold.
	FetchMaxBytes int `yaml:"fetch_max_bytes"`
	// FetchMaxPartitionBytes bounds what one fetch takes from each
	// partition, counted as Kafka stores it (compressed). The client holds
	// what it fetched decompressed until the router has polled it, so with
	// payloads that compress well this bound, times the partitions a
	// replica holds, sets most of its memory: 256 KiB, a quarter of the
	// Kafka client's default, halved the benchmark's peak RSS at the same
	// records/s (docs/benchmark.md). A partition whose batches are larger,
	// compressed, still progresses, one batch a fetch: Kafka returns the
	// fetch's first batch whatever the bound, and moves a partition that
	// returned data to the end of its fetch session's order (kfake, the
	// in-process broker of the tests, does not: there one such partition
	// drains before the next). Raise it to the producers' batch size for
	// topics of large batches that compress little.
	FetchMaxPartitionBytes int `yaml:"fetch_max_partition_bytes"`
	// MaxValueBytes rejects larger records to the dead-letter topic. Keep it
	// under Temporal's payload limit (2 MB by default), less the envelope.
	MaxValueBytes int `yaml:"max_value_bytes"`

	// CommitInterval is how often finished offsets are committed. A crash
	// redelivers at most this much finished work, which the ledger skips.
	CommitInterval time.Duration `yaml:"commit_interval"`
	// RevokeTimeout is how long a revoked partition's in-flight records get
	// to finish before the rebalance goes on without them. What did not
	// finish is not committed and is redelivered to the new owner.
	RevokeTimeout time.Duration `yaml:"revoke_timeout"`
	// DrainTimeout bounds the whole shutdown (SIGTERM): in-flight records
	// get three quarters of it (a quarter, at least 1s and at most 5s, is
	// kept for the final mark, commit and leaving the group:
	// shutdownReserve), and a leave that a rebalance in progress holds up
	// is not waited for past it. Keep it under the orchestrator's grace
	// period. At least minDrainTimeout.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// LagInterval is how often consumer lag is measured (one ListOffsets
	// request per interval).
	LagInterval time.Duration `yaml:"lag_interval"`

	// DeadLetterTopic receives records that can never succeed, with the
	// reason in headers. "{topic}" stands for the source topic.
	DeadLetterTopic string `yaml:"dead_letter_topic"`
	// NoRoute decides what happens to an event no route matches: "skip"
	// (count it and commit) or "dead_letter".
	NoRoute string `yaml:"no_route"`

	// TLS and SASL say how every Kafka client of dedup connects: the
	// consumer, the dead-letter producer (the same client) and the admin
	// clients. New applies them to the router's client, and every other
	// client takes them through ClientOpts (clientopts.go).
	TLS  clienttls.Config `yaml:"tls"`
	SASL kafkasasl.Config `yaml:"sasl"`
	// AllowInsecure lets a Kafka credential cross the network unencrypted:
	// SASL to a broker not on this machine without TLS, or a
	// kafka.sasl.token_url over http:// to a host not on this machine
	// (anyone on the path can read or replay it). Validate refuses both
	// without it; loopback brokers and token URLs (127.0.0.0/8, ::1,
	// localhost) are always allowed; nor SASL over TLS that does not verify
	// the broker (kafka.tls.insecure_skip_verify). Every broker the clients
	// dial, advertised ones too, is checked again at the dial against the
	// address dialled (connect/dialguard). As postgres.allow_insecure.
	AllowInsecure bool `yaml:"allow_insecure"`

	// TenantKeysFile is the tenant keyring (processor/tenantsig): the keys
	// with which dedup ingress signs its tenants' records and the routers
	// verify them. Only the ingress and the routers may read it. Empty: no
	// record speaks for a tenant, and one that carries the dedup-tenant
	// header is dead-lettered (forged_tenant); required with
	// ingress.tokens_file. Read again when it changes (rotation: docs/security.md).
	TenantKeysFile string `yaml:"tenant_keys_file"`
	// TenantKeys is the keyring itself, for callers that hold it already
	// (the producer client); when set, TenantKeysFile is not read.
	TenantKeys *tenantsig.Keyring `yaml:"-"`

	// SchemaRegistry, when its url is set, reads values in the Schema
	// Registry wire format (a zero byte, the schema ID) as the logical
	// value their schema gives them (processor/srdecode; docs/schema-registry.md).
	SchemaRegistry schemaregistry.Config `yaml:"schema_registry"`

	// EventID, Routes, Starts and Retry are top-level sections of the
	// config file.
	EventID eventid.Config `yaml:"-"`
	Routes  decide.Routes  `yaml:"-"`
	Starts  StartConfig    `yaml:"-"`
	Retry   RetryConfig    `yaml:"-"`
}

// StartConfig is the config file's starts section: how workflows are
// started and marked.
type StartConfig struct {
	// Concurrency is how many workflow starts run at once. Starts are
	// independent RPCs; a retried start blocks only its own record's offset.
	Concurrency int `yaml:"concurrency"`
	// MarkBatch and MarkInterval bound how started workflows are batched
	// into one ledger update: a record is finished (committable) once its
	// workflow is marked, so the interval adds to commit latency. The
	// default interval (250ms) is a quarter of the commit interval: at a
	// few hundred starts a second, 10ms made one statement of one or two
	// rows per start, about a tenth of the router's CPU per workflow, and
	// 100ms one of a few dozen, each with its round trip and the wake-up
	// of an otherwise idle process (issue #43's profiles); a mark that
	// waits is not a risk (a crash before it re-drives the row, and
	// Temporal answers the same request ID with the same run). While a
	// revoke or the drain waits for records, marks go at once
	// (startPool.hurry).
	MarkBatch    int           `yaml:"mark_batch"`
	MarkInterval time.Duration `yaml:"mark_interval"`
}

// RetryConfig is the config file's retry section: the capped exponential
// backoff of transient PostgreSQL, Temporal and Kafka errors. Max is also
// how long a dependency must fail without a success before fetching is
// paused.
type RetryConfig struct {
	Initial time.Duration `yaml:"initial"`
	Max     time.Duration `yaml:"max"`
}

// Validate names the retry section's invalid field: the backoff needs
// 0 < initial <= max (a zero initial retries without a pause, a negative
// one cannot be waited with).
func (r RetryConfig) Validate() error {
	if r.Initial <= 0 || r.Max < r.Initial {
		return fmt.Errorf("retry.initial/retry.max: %s/%s, want 0 < initial <= max", r.Initial, r.Max)
	}
	return nil
}

// DefaultConfig leaves Brokers, Group, Topics, ResetOffset and Routes to
// the user.
func DefaultConfig() Config {
	return Config{
		IsolationLevel:         IsolationReadCommitted,
		SessionTimeout:         45 * time.Second,
		RebalanceTimeout:       time.Minute,
		MaxPollRecords:         1000,
		MaxInFlight:            10000,
		MaxValueBytes:          1 << 20,
		FetchMaxBytes:          16 << 20,
		FetchMaxPartitionBytes: 256 << 10,
		CommitInterval:         time.Second,
		RevokeTimeout:          10 * time.Second,
		DrainTimeout:           20 * time.Second,
		LagInterval:            15 * time.Second,
		DeadLetterTopic:        "{topic}.dlq",
		NoRoute:                "skip",
		EventID:                eventid.DefaultConfig(),
		Starts:                 StartConfig{Concurrency: 32, MarkBatch: 512, MarkInterval: 250 * time.Millisecond},
		Retry:                  RetryConfig{Initial: 100 * time.Millisecond, Max: 10 * time.Second},
	}
}

// Validate names the first invalid field and fills route defaults.
func (c *Config) Validate() error {
	positive := func(name string, v int) error {
		if v <= 0 {
			return fmt.Errorf("kafka.%s: %d, want > 0", name, v)
		}
		return nil
	}
	for i, b := range c.Brokers {
		if strings.TrimSpace(b) == "" {
			// franz-go dials an empty seed as ":9092", this machine.
			return fmt.Errorf("kafka.brokers[%d]: empty (a seed broker is host:port)", i)
		}
	}
	switch {
	case len(c.Brokers) == 0:
		return errors.New("kafka.brokers: empty")
	case c.Group == "":
		return errors.New("kafka.group: empty")
	case len(c.Topics) == 0:
		return errors.New("kafka.topics: empty")
	case c.ResetOffset != "earliest" && c.ResetOffset != "latest":
		return fmt.Errorf("kafka.reset_offset: %q, want earliest or latest (required)", c.ResetOffset)
	case c.IsolationLevel != IsolationReadCommitted && c.IsolationLevel != IsolationReadUncommitted:
		return fmt.Errorf("kafka.isolation_level: %q, want %s (the default) or %s", c.IsolationLevel, IsolationReadCommitted, IsolationReadUncommitted)
	case c.SessionTimeout < time.Second:
		return fmt.Errorf("kafka.session_timeout: %s, want at least 1s", c.SessionTimeout)
	case c.RebalanceTimeout < time.Second:
		return fmt.Errorf("kafka.rebalance_timeout: %s, want at least 1s", c.RebalanceTimeout)
	case c.DeadLetterTopic == "":
		return errors.New("kafka.dead_letter_topic: empty")
	case c.NoRoute != "skip" && c.NoRoute != "dead_letter":
		return fmt.Errorf("kafka.no_route: %q, want skip or dead_letter", c.NoRoute)
	case c.MaxValueBytes > 2<<20:
		return fmt.Errorf("kafka.max_value_bytes: %d is over Temporal's 2 MiB payload limit", c.MaxValueBytes)
	case c.Retry.Validate() != nil:
		return c.Retry.Validate()
	case c.Starts.Concurrency <= 0:
		return fmt.Errorf("starts.concurrency: %d, want > 0", c.Starts.Concurrency)
	case c.Starts.MarkBatch <= 0:
		return fmt.Errorf("starts.mark_batch: %d, want > 0", c.Starts.MarkBatch)
	case c.Starts.MarkInterval <= 0:
		return fmt.Errorf("starts.mark_interval: %s, want > 0", c.Starts.MarkInterval)
	case c.CommitInterval <= 0 || c.RevokeTimeout <= 0 || c.DrainTimeout <= 0 || c.LagInterval <= 0:
		return errors.New("kafka.commit_interval, revoke_timeout, drain_timeout, lag_interval: want > 0")
	case c.DrainTimeout < minDrainTimeout:
		return fmt.Errorf("kafka.drain_timeout: %s, want at least %s (the shutdown keeps 1s of it for the final mark, offset commit and leave, and gives in-flight records the rest)", c.DrainTimeout, minDrainTimeout)
	case c.Starts.MarkInterval >= c.RevokeTimeout:
		// A record finishes only once its workflows are marked: waiting
		// that long, every revoke would abandon what was started and not
		// yet marked (the new owner re-drives it all).
		return fmt.Errorf("starts.mark_interval: %s, want below kafka.revoke_timeout (%s)", c.Starts.MarkInterval, c.RevokeTimeout)
	}
	if err := c.TLS.Validate("kafka.tls"); err != nil {
		return err
	}
	if err := c.SASL.Validate(); err != nil {
		return err
	}
	if err := c.SchemaRegistry.Validate("kafka.schema_registry"); err != nil {
		return err
	}
	if !c.AllowInsecure {
		if err := c.SASL.Plaintext(c.Brokers, c.TLS.On()); err != nil {
			return fmt.Errorf("%w, or accept the risk with kafka.allow_insecure: true", err)
		}
		if c.SASL.On() && c.TLS.InsecureSkipVerify {
			for _, b := range c.Brokers {
				host, _, err := net.SplitHostPort(b)
				if err != nil {
					host = b
				}
				if !dialguard.LoopbackHost(host) {
					return fmt.Errorf("kafka.tls.insecure_skip_verify: kafka.sasl.mechanism %s would send credentials to %s without verifying who it is: "+
						"drop it (kafka.tls.ca_file for a private CA), or accept the risk with kafka.allow_insecure: true", c.SASL.Name(), b)
				}
			}
		}
	}
	for _, t := range c.Topics {
		if strings.Replace(c.DeadLetterTopic, "{topic}", t, 1) == t {
			return fmt.Errorf("kafka.dead_letter_topic: %q is the source topic %q itself", c.DeadLetterTopic, t)
		}
	}
	for name, v := range map[string]int{"max_poll_records": c.MaxPollRecords, "max_in_flight": c.MaxInFlight,
		"max_value_bytes": c.MaxValueBytes,
		"fetch_max_bytes": c.FetchMaxBytes, "fetch_max_partition_bytes": c.FetchMaxPartitionBytes} {
		if err := positive(name, v); err != nil {
			return err
		}
	}
	for name, v := range map[string]int{"fetch_max_bytes": c.FetchMaxBytes, "fetch_max_partition_bytes": c.FetchMaxPartitionBytes} {
		if v > maxFetchBytes {
			return fmt.Errorf("kafka.%s: %d is over the Kafka client's bound of %d bytes on one answer", name, v, maxFetchBytes)
		}
	}
	if err := c.EventID.Validate(); err != nil {
		return err
	}
	return c.Routes.Validate()
}

// minDrainTimeout is the shortest kafka.drain_timeout: the shutdown's
// last steps (the marker's final flush, the final commit's two round
// trips to the group coordinator, the leave) keep at least 1s of it
// (shutdownReserve), whatever the drain took, and the drain gets the
// rest. A final commit cut short is lost (the next owner re-drives what
// this router started); a quarter of a smaller drain_timeout is less
// than a loaded broker takes to answer those two requests.
const minDrainTimeout = 2 * time.Second

// maxFetchBytes is the most the Kafka client reads in one broker answer
// (kgo.BrokerMaxReadBytes' default): a larger fetch bound makes the
// client refuse to start.
const maxFetchBytes = 100 << 20

// FetchLimits are the Kafka client's fetch bounds (fetch_max_bytes,
// fetch_max_partition_bytes): every consumer dedup runs takes them.
func (c *Config) FetchLimits() []kgo.Opt {
	return []kgo.Opt{kgo.FetchMaxBytes(int32(c.FetchMaxBytes)), kgo.FetchMaxPartitionBytes(int32(c.FetchMaxPartitionBytes))}
}

// The values of kafka.isolation_level.
const (
	IsolationReadCommitted   = "read_committed"
	IsolationReadUncommitted = "read_uncommitted"
)

// FetchIsolation is the Kafka client option for IsolationLevel: every
// consumer dedup runs (the router, the operators' forecasts and replays)
// takes it. Anything but read_uncommitted reads committed records only.
func (c *Config) FetchIsolation() kgo.Opt {
	if c.IsolationLevel == IsolationReadUncommitted {
		return kgo.FetchIsolationLevel(kgo.ReadUncommitted())
	}
	return kgo.FetchIsolationLevel(kgo.ReadCommitted())
}

// DeadLetterTopicFor names the dead-letter topic of a source topic.
func (c *Config) DeadLetterTopicFor(source string) string {
	return strings.ReplaceAll(c.DeadLetterTopic, "{topic}", source)
}

// Decide is the part of c a Decider reads (decide.Config): the event ID
// rules, the routes, max_value_bytes, no_route and the tenant keyring.
func (c *Config) Decide() decide.Config {
	return decide.Config{EventID: c.EventID, Routes: c.Routes, MaxValueBytes: c.MaxValueBytes, NoRoute: c.NoRoute,
		TenantKeysFile: c.TenantKeysFile, TenantKeys: c.TenantKeys}
}
