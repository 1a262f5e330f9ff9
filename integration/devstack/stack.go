// Package devstack runs dedup's dependencies in one process, for the dev
// stack (cmd/devstack), the integration tests and the benchmark: franz-go's
// kfake broker (the real Kafka protocol), a real Temporal server with an
// in-memory store, and a throwaway PostgreSQL cluster (or DATABASE_URL).
// It is the only package besides integration/ that links the Temporal
// server.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.temporal.io/server/common/dynamicconfig"

	"github.com/dedupio/dedup/internal/testsupport/pgcluster"
)

// Config says what to start.
type Config struct {
	KafkaPort    int // 0: any free port
	TemporalPort int // 0: any free port
	PostgresPort int // 0: any free port; ignored with DatabaseURL
	// Topics are created with Partitions partitions each, and so is every
	// "<topic>.dlq".
	Topics     []string
	Partitions int
	Namespace  string
	// DatabaseURL uses an existing PostgreSQL instead of a throwaway one.
	DatabaseURL string
	// DurablePostgres keeps fsync on (benchmarks).
	DurablePostgres bool
	// PostgresSettings are more settings of the throwaway cluster
	// (name=value each; pgcluster.Options.Settings).
	PostgresSettings []string
	// TemporalFaults, if set, is installed on the Temporal frontend.
	TemporalFaults *TemporalFaults
	// TemporalDynamic overrides the Temporal server's dynamic config
	// (TemporalConfig.Dynamic), e.g. a per-run limit made small for one
	// namespace.
	TemporalDynamic dynamicconfig.StaticClient
	// KafkaDataDir keeps the broker's log, offsets and groups on disk, so
	// that RestartKafka brings it back with its data.
	KafkaDataDir string
	// KafkaListen, if set, opens the broker's listener (kfake.ListenFn).
	// The broker advertises the listener's Addr in metadata, so a
	// listener that reports a proxy's address makes every client dial
	// through that proxy (the benchmark's latency proxy).
	KafkaListen func(network, address string) (net.Listener, error)
}

// Stack is the running dependencies.
type Stack struct {
	// Kafka is replaced by RestartKafka: read it each time.
	Kafka     *kfake.Cluster
	kafkaOpts []kfake.Opt
	// kafkaPersistent: the broker keeps its data on disk (KafkaDataDir).
	kafkaPersistent bool
	// kafkaPort and kafkaAddrs are the stopped broker's (StopKafka); 0
	// and nil while it runs.
	kafkaPort   int
	kafkaAddrs  []string
	Temporal    *Temporal
	Postgres    *pgcluster.Cluster // nil when DatabaseURL was given
	DatabaseURL string
	Namespace   string
}

// Brokers are the Kafka seed addresses (while the broker is stopped, the
// addresses it will come back on).
func (s *Stack) Brokers() []string {
	if s.kafkaAddrs != nil {
		return s.kafkaAddrs
	}
	return s.Kafka.ListenAddrs()
}

// Start starts everything; on error, what started is stopped.
func Start(ctx context.Context, cfg Config) (_ *Stack, err error) {
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 1
	}
	s := &Stack{Namespace: cfg.Namespace}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	var topics []string
	for _, t := range cfg.Topics {
		topics = append(topics, t, t+".dlq")
	}
	kopts := []kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation()}
	if cfg.KafkaDataDir != "" {
		kopts = append(kopts, kfake.DataDir(cfg.KafkaDataDir))
	}
	if cfg.KafkaListen != nil {
		kopts = append(kopts, kfake.ListenFn(cfg.KafkaListen))
	}
	s.kafkaOpts, s.kafkaPersistent = kopts, cfg.KafkaDataDir != ""
	if cfg.KafkaPort != 0 {
		kopts = append(kopts, kfake.Ports(cfg.KafkaPort))
	}
	if s.Kafka, err = kfake.NewCluster(append(kopts, kfake.SeedTopics(int32(cfg.Partitions), topics...))...); err != nil {
		return nil, fmt.Errorf("starting kfake: %w", err)
	}
	if cfg.DatabaseURL != "" {
		s.DatabaseURL = cfg.DatabaseURL
	} else {
		if s.Postgres, err = pgcluster.Start(ctx, pgcluster.Options{Port: cfg.PostgresPort, Durable: cfg.DurablePostgres,
			Settings: cfg.PostgresSettings}); err != nil {
			return nil, err
		}
		if s.DatabaseURL, err = s.Postgres.CreateDatabase(ctx, "dedup"); err != nil {
			return nil, err
		}
	}
	tcfg := TemporalConfig{FrontendPort: cfg.TemporalPort, Namespaces: []string{cfg.Namespace}, Dynamic: cfg.TemporalDynamic}
	if cfg.TemporalFaults != nil {
		tcfg.ExtraOptions = append(tcfg.ExtraOptions, cfg.TemporalFaults.ServerOption())
	}
	if s.Temporal, err = StartTemporal(tcfg); err != nil {
		return nil, err
	}
	return s, nil
}

// RestartKafka stops the broker, waits down, and starts it again on the
// same port with the data it had (Config.KafkaDataDir): a full broker
// restart, as a rolling upgrade of a one-broker cluster or a crash would
// do. Clients see connections refused meanwhile.
func (s *Stack) RestartKafka(down time.Duration) error {
	if err := s.StopKafka(); err != nil {
		return err
	}
	time.Sleep(down)
	return s.StartKafka()
}

// StopKafka stops the broker (connections refused from now on) and keeps
// its data for StartKafka (Config.KafkaDataDir).
func (s *Stack) StopKafka() error {
	if !s.kafkaPersistent {
		return errors.New("devstack: StopKafka needs Config.KafkaDataDir")
	}
	if s.kafkaPort != 0 {
		return errors.New("devstack: kafka is already stopped")
	}
	addr := s.Kafka.ListenAddrs()[0]
	_, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if s.kafkaPort, err = strconv.Atoi(portText); err != nil {
		return err
	}
	s.kafkaAddrs = s.Kafka.ListenAddrs()
	s.Kafka.Close()
	return nil
}

// StartKafka starts the broker StopKafka stopped, on the same port, with
// its data (log, committed offsets, groups).
func (s *Stack) StartKafka() error {
	if s.kafkaPort == 0 {
		return errors.New("devstack: kafka is not stopped")
	}
	var c *kfake.Cluster
	var err error
	for tries := 0; ; tries++ { // the port may linger a moment after close
		if c, err = kfake.NewCluster(append(s.kafkaOpts, kfake.Ports(s.kafkaPort))...); err == nil || tries == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("restarting kfake on port %d: %w", s.kafkaPort, err)
	}
	s.Kafka, s.kafkaPort, s.kafkaAddrs = c, 0, nil
	return nil
}

// Stop stops everything that runs.
func (s *Stack) Stop() {
	if s.Temporal != nil {
		done := make(chan struct{})
		go func() { _ = s.Temporal.Stop(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			fmt.Fprintln(os.Stderr, "devstack: temporal did not stop in 20s; leaving it")
		}
	}
	if s.Kafka != nil && s.kafkaPort == 0 {
		s.Kafka.Close()
	}
	if s.Postgres != nil {
		if err := s.Postgres.Stop(); err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintln(os.Stderr, "devstack: stopping postgres:", err)
		}
	}
}
