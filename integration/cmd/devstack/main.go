// Command devstack runs dedup on an embedded stack: kfake on
// 127.0.0.1:9092, an in-process Temporal server on 127.0.0.1:7233, a
// throwaway PostgreSQL (or DATABASE_URL), the router, the HTTP ingress on
// 127.0.0.1:8080, a demo worker and a demo producer that sends duplicates.
// Ctrl-C stops and removes it all.
//
// From integration/ (the lab's module; `make dev` from the root):
//
//	go run ./cmd/devstack                # everything, with a summary every 5s
//	go run ./cmd/devstack -infra-only    # only Kafka, Temporal and PostgreSQL
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/dedupio/dedup/integration/devstack"
	"github.com/dedupio/dedup/internal/app"
	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/internal/ingress"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/schedule"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/worker"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		infraOnly  = flag.Bool("infra-only", false, "start Kafka, Temporal and PostgreSQL only, print their addresses and wait")
		kafkaPort  = flag.Int("kafka-port", 9092, "kfake port on 127.0.0.1")
		tempPort   = flag.Int("temporal-port", 7233, "Temporal frontend port on 127.0.0.1")
		pgPort     = flag.Int("postgres-port", 0, "throwaway PostgreSQL port (0: any free one); ignored with DATABASE_URL")
		topic      = flag.String("topic", "events", "topic to consume (and <topic>.dlq)")
		partitions = flag.Int("partitions", 8, "partitions per topic")
		rate       = flag.Int("rate", 20, "demo records per second (20: the demo worker keeps up on two cores; the router alone takes far more)")
		records    = flag.Int("records", 0, "stop producing after this many records (0: until Ctrl-C)")
		dupRatio   = flag.Float64("dup-ratio", 0.3, "share of demo records that re-send an earlier event")
		every      = flag.Duration("summary-every", 5*time.Second, "how often to print the summary")
		adminAddr  = flag.String("admin", "127.0.0.1:9464", "router admin port (/metrics, /healthz, /readyz)")
		ingressAt  = flag.String("ingress", "127.0.0.1:8080", "HTTP ingress address (POST /v1/events); empty: no ingress")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	fmt.Println("starting kfake, Temporal and PostgreSQL ...")
	stack, err := devstack.Start(ctx, devstack.Config{
		KafkaPort: *kafkaPort, TemporalPort: *tempPort, PostgresPort: *pgPort,
		Topics: []string{*topic}, Partitions: *partitions, Namespace: "default",
		DatabaseURL: os.Getenv("DATABASE_URL"),
	})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("stopping the stack ...")
		stack.Stop()
	}()

	hooks, err := devstack.StartWebhooks()
	if err != nil {
		return err
	}
	defer hooks.Close()
	mails, err := devstack.StartMailbox()
	if err != nil {
		return err
	}
	defer mails.Close()
	cfg := demoConfig(stack, *topic, *adminAddr, hooks.URL(), mails)
	dir, err := os.MkdirTemp("", "dedup-dev-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	cfgPath := filepath.Join(dir, "dedup.yaml")
	if err := writeConfig(cfgPath, cfg); err != nil {
		return err
	}
	fmt.Printf(`
  Kafka      %s   topics %s, %s.dlq (%d partitions)
  Temporal   %s   namespace default
  PostgreSQL %s
  webhooks   %s   (the demo routes' webhook tasks; counts deliveries per Idempotency-Key)
  mailbox    smtp://%s:%d   (the tenant onboarding's welcome emails; counts deliveries per Message-ID)
  config     %s

  produce:   kcat -b %s -t %s -P -k key1   (then type {"id":"e1","type":"order.created"})
  read DLQ:  kcat -b %s -t %s.dlq -C -f '%%h %%s\n'
  a router:  DATABASE_URL=%s go run ./cmd/dedup run --config %s
`, strings.Join(stack.Brokers(), ","), *topic, *topic, *partitions, stack.Temporal.HostPort(), stack.DatabaseURL, hooks.URL(), mails.Host(), mails.Port(), cfgPath,
		stack.Brokers()[0], *topic, stack.Brokers()[0], *topic, stack.DatabaseURL, cfgPath)

	if *infraOnly {
		fmt.Println("\ninfrastructure only; Ctrl-C to stop")
		<-ctx.Done()
		return nil
	}

	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	workerDone := make(chan error, 1)
	go func() { workerDone <- app.RunWorker(ctx, cfg, log) }()
	routerDone := make(chan error, 1)
	ready := make(chan string, 1)
	go func() { routerDone <- app.Run(ctx, cfg, app.Options{Logger: log, Registry: reg, Ready: ready}) }()
	select {
	case addr := <-ready:
		fmt.Printf("  router:    running, metrics on http://%s/metrics\n\n", addr)
	case err := <-routerDone:
		return err
	}

	ingressDone := make(chan error, 1)
	if *ingressAt != "" {
		icfg := cfg
		icfg.Ingress.Listen, icfg.Ingress.AdminListen = *ingressAt, ""
		iready := make(chan string, 1)
		go func() { ingressDone <- ingress.Run(ctx, icfg, ingress.RunOptions{Logger: log, Ready: iready}) }()
		select {
		case addr := <-iready:
			fmt.Printf(`  ingress:   http://%s (enqueue one event twice with one key, then ask for its one run):
    curl -sS -X POST http://%s/v1/events -H 'Content-Type: application/json' -H 'Idempotency-Key: "order-123"' -d '{"type":"order.created","total":12.5}'
    curl -sS http://%s/v1/workflows/activity-order-confirmation:order-123
             onboard a tenant (the audit seed's create_tenant_schema, run_migrations, send_welcome_email), then offboard it:
    curl -sS -X POST http://%s/v1/events -H 'Content-Type: application/json' -H 'Idempotency-Key: "acme-created"' -d '{"type":"tenant.created","tenant_id":"acme","name":"Acme","email":"owner@acme.example"}'
    curl -sS -X POST http://%s/v1/events -H 'Content-Type: application/json' -H 'Idempotency-Key: "acme-deleted"' -d '{"type":"tenant.deleted","tenant_id":"acme"}'

`, addr, addr, addr, addr, addr)
		case err := <-ingressDone:
			return fmt.Errorf("ingress: %w", err)
		}
	}

	prodDone := make(chan error, 1)
	go func() {
		prodDone <- workload.Produce(ctx, workload.ProduceOptions{Brokers: stack.Brokers(), Topic: *topic, Partitions: *partitions,
			Rate: *rate, Limit: *records, DupRatio: *dupRatio, OnError: func(err error) { fmt.Fprintln(os.Stderr, "demo producer:", err) }})
	}()

	lc := ledger.DefaultConfig()
	lc.URL = stack.DatabaseURL
	led, err := ledger.Open(ctx, lc)
	if err != nil {
		return err
	}
	defer led.Close()
	keys, err := pgxpool.New(ctx, stack.DatabaseURL)
	if err != nil {
		return err
	}
	defer keys.Close()
	tick := time.NewTicker(*every)
	defer tick.Stop()
	var committed float64 // the last summary's, for the one after the router left
	// The routes whose workflow runs one webhook step: their started
	// workflows and completed webhook keys give the demo worker's lag.
	var hooked []string
	for _, r := range cfg.Routes {
		if r.Definition != nil && len(r.Definition.Tasks) == 1 && r.Definition.Tasks[0].Type == "webhook" {
			hooked = append(hooked, r.ID)
		}
	}
	lagNoted := false
	for {
		select {
		case <-tick.C:
			var queued int64
			committed, queued = summary(ctx, reg, led, keys, hooks, mails, hooked, 0)
			if queued > demoLagNote && !lagNoted {
				lagNoted = true
				fmt.Printf("  note: the demo worker runs behind the router (%d webhook workflows started and not completed): the in-process Temporal\n"+
					"        server (one shard, in memory) shares this machine's cores with everything else, and a workflow's tasks cost it more\n"+
					"        than a start. The router's figures are not held up by it. A lower -rate lets the worker keep up (20, the default,\n"+
					"        did on a two-core machine).\n", queued)
			}
		case err := <-prodDone:
			if err != nil && ctx.Err() == nil {
				return err
			}
			prodDone = nil
		case err := <-routerDone:
			summary(context.Background(), reg, led, keys, hooks, mails, hooked, committed)
			return err
		case err := <-workerDone:
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("worker: %w", err)
			}
			workerDone = nil
		case err := <-ingressDone:
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("ingress: %w", err)
			}
			ingressDone = nil
		}
	}
}

func demoConfig(stack *devstack.Stack, topic, admin, webhookURL string, mails *devstack.Mailbox) config.Config {
	cfg := config.Default()
	cfg.Kafka.Brokers = stack.Brokers()
	cfg.Kafka.Group = "dedup-dev"
	cfg.Kafka.Topics = []string{topic}
	cfg.Kafka.ResetOffset = "earliest"
	cfg.Kafka.SessionTimeout = 10 * time.Second
	// Two routes send a webhook (a real side effect, under the step key
	// {task_id}:post, to the local counting endpoint); one does nothing.
	webhook := &schemas.ActivityDefinition{Tasks: []schemas.TaskSpec{{Type: "webhook"}}, MaxAttempts: 5}
	noop := &schemas.ActivityDefinition{Tasks: []schemas.TaskSpec{{Type: "noop"}}}
	cfg.Routes = decide.Routes{
		{ID: "order-confirmation", Match: decide.Match{Type: workload.TypeOrder}, WorkflowType: worker.RunActivityWorkflowName, TaskQueue: "activities", Definition: webhook},
		{ID: "welcome-email", Match: decide.Match{Type: workload.TypeSignup}, WorkflowType: worker.RunActivityWorkflowName, TaskQueue: "activities", Definition: webhook},
		{ID: "crm-sync", Match: decide.Match{Type: workload.TypeSignup}, WorkflowType: worker.RunActivityWorkflowName, TaskQueue: "activities", Definition: noop},
		// The activity-idempotency audit seed's five activities
		// (worker/tenants, worker.tenants below), on events sent by hand
		// through the ingress (the printed curl lines).
		{ID: "tenant-onboarding", Match: decide.Match{Type: "tenant.created"}, WorkflowType: worker.RunActivityWorkflowName, TaskQueue: "activities",
			Definition: &schemas.ActivityDefinition{Tasks: []schemas.TaskSpec{{Type: "create_tenant_schema"}, {Type: "run_migrations"}, {Type: "send_welcome_email"}}, MaxAttempts: 5}},
		{ID: "tenant-offboarding", Match: decide.Match{Type: "tenant.deleted"}, WorkflowType: worker.RunActivityWorkflowName, TaskQueue: "activities",
			Definition: &schemas.ActivityDefinition{Tasks: []schemas.TaskSpec{{Type: "drop_tenant_schema"}, {Type: "soft_delete_tenant"}}, MaxAttempts: 5}},
	}
	// A demo schedule every five seconds (docs/schedules.md): its fires
	// show in the summary line.
	cfg.Schedules.Triggers = []schedule.Trigger{{Name: "demo-report", ActivityID: "demo-report", Cron: "*/5 * * * * *",
		MisfirePolicy: schedule.Compress, WorkflowType: worker.RunActivityWorkflowName, TaskQueue: "activities",
		Definition: &schemas.ActivityDefinition{DedupeKeyStrategy: "compress", Tasks: []schemas.TaskSpec{{Type: "noop"}}}}}
	cfg.Worker.TaskQueue = "activities"
	cfg.Worker.WebhookURL = webhookURL
	cfg.Worker.Tenants.Enabled = true
	cfg.Worker.Tenants.SMTP.Host, cfg.Worker.Tenants.SMTP.Port = mails.Host(), mails.Port() // loopback: no TLS needed
	cfg.Worker.Tenants.SMTP.From = "hello@dedup.dev"
	cfg.Temporal.HostPort = stack.Temporal.HostPort()
	cfg.Admin.Listen = admin
	cfg.Log.Format = "text"
	cfg.Postgres.URL = stack.DatabaseURL
	return cfg
}

func writeConfig(path string, cfg config.Config) error {
	file := cfg
	file.Postgres.URL = "${DATABASE_URL}"
	b, err := yaml.Marshal(file)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// demoLagNote is how many started webhook workflows the demo worker may
// have left to run before the dev stack says why it lags.
const demoLagNote = 1000

// summary prints one summary line and returns its committed offsets and
// the webhook workflows the demo worker has not completed (started in the
// ledger, their webhook key not completed: queued, running, or failed for
// good). A router that has left the
// group exports no committed offsets (its per-partition gauges go with its
// partitions): the line then shows lastCommitted, the previous summary's,
// marked as such.
func summary(ctx context.Context, reg *prometheus.Registry, led *ledger.Postgres, keys *pgxpool.Pool, hooks *devstack.Webhooks, mails *devstack.Mailbox, webhookRoutes []string, lastCommitted float64) (float64, int64) {
	mfs, err := reg.Gather()
	if err != nil {
		return lastCommitted, 0
	}
	val := func(name, label, value string) float64 {
		total := 0.0
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				match := label == ""
				for _, l := range m.GetLabel() {
					if l.GetName() == label && l.GetValue() == value {
						match = true
					}
				}
				if match {
					total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
		return total
	}
	counts, err := led.Count(ctx)
	ledgerLine := fmt.Sprintf("ledger pending %d started %d", counts.Pending, counts.Started)
	if err != nil {
		ledgerLine = "ledger unavailable"
	}
	// Deliveries next to keys: each webhook step's key completed in the
	// store once, and delivered once at the endpoint (a repeat after a
	// crash reaches it with the same key and is dropped).
	var completed, started, queued int64
	keysLine := "webhook keys unavailable"
	if err := keys.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE status = 'completed' AND key LIKE '%:webhook:%:post'`).Scan(&completed); err == nil {
		keysLine = fmt.Sprintf("webhook keys completed %6d", completed)
		if err := keys.QueryRow(ctx, `SELECT count(*) FROM dedup_ledger WHERE state = 'started' AND activity_id = ANY($1::text[])`, webhookRoutes).Scan(&started); err == nil && started > completed {
			queued = started - completed
			keysLine += fmt.Sprintf(" (%d started workflows not completed)", queued)
		}
	}
	hc, mc := hooks.Counts(), mails.Counts()
	committed, committedNote := val("dedup_committed_offset", "", ""), ""
	if committed == 0 && lastCommitted > 0 {
		committed, committedNote = lastCommitted, " (before the router left the group)"
	}
	fmt.Printf("%s  records in %6.0f | new workflows %6.0f | duplicates skipped %6.0f | conflicts %3.0f | dead letters %3.0f | workflows started %6.0f (already started %3.0f) | committed offsets %6.0f%s | %s | %s | webhooks delivered %6d (repeats dropped %d) | welcome emails %d (repeats dropped %d) | schedule runs %3.0f (slots on time %.0f, late %.0f, skipped %.0f)\n",
		time.Now().Format("15:04:05"),
		val("dedup_records_total", "", ""),
		val("dedup_intents_total", "outcome", "new"),
		val("dedup_intents_total", "outcome", "duplicate"),
		val("dedup_intents_total", "outcome", "conflict"),
		val("dedup_dead_letters_total", "", ""),
		val("dedup_workflow_starts_total", "result", "started"),
		val("dedup_workflow_starts_total", "result", "already_started"),
		committed, committedNote,
		ledgerLine, keysLine, hc.Deliveries, hc.Dropped, mc.Deliveries, mc.Dropped,
		val("dedup_schedule_starts_total", "result", "started"),
		val("dedup_schedule_fires_total", "outcome", "on_time"),
		val("dedup_schedule_fires_total", "outcome", "catchup")+val("dedup_schedule_fires_total", "outcome", "compressed"),
		val("dedup_schedule_fires_total", "outcome", "skipped"))
	return committed, queued
}
