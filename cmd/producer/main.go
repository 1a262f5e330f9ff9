// Command producer writes a demo event stream with duplicates to Kafka: the
// docker-compose demo's producer (the embedded dev stack has its own).
//
//	producer -brokers kafka:9092 -topic events -rate 100
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/dedupio/dedup/internal/demo/workload"
)

func main() {
	var (
		brokers    = flag.String("brokers", "127.0.0.1:9092", "comma-separated seed brokers")
		topic      = flag.String("topic", "events", "topic")
		partitions = flag.Int("partitions", 8, "the topic's partition count (records are placed by key)")
		rate       = flag.Int("rate", 100, "records per second")
		records    = flag.Int("records", 0, "stop after this many (0: until stopped)")
		dupRatio   = flag.Float64("dup-ratio", 0.3, "share of records that re-send an earlier event")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := workload.Produce(ctx, workload.ProduceOptions{Brokers: strings.Split(*brokers, ","), Topic: *topic,
		Partitions: *partitions, Rate: *rate, Limit: *records, DupRatio: *dupRatio,
		OnError: func(err error) { fmt.Fprintln(os.Stderr, "producer:", err) }})
	if err != nil {
		fmt.Fprintln(os.Stderr, "producer:", err)
		os.Exit(1)
	}
}
