package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dedupio/dedup/connect/tracing/otlp"
	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/worker/tenants"
)

// dedup validate runs what dedup ingress checks at start: the exposure
// rule (no tokens file on a non-loopback listen), the tokens file (routes
// it names exist, default deny) and the tenant keyring; and it refuses a
// public_url with user info, without echoing it.
func TestValidateRunsTheIngressChecks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keys := write("keys.yaml", "keys: [{id: k1, secret: dGVzdC10ZW5hbnQta2V5LTAxMjM0NTY3ODlhYmNkZWY=}]\n")
	good := write("tokens.yaml", "tokens: [{tenant: acme, token: acme-token-0123456789, event_types: [\"*\"], routes: [a]}]\n")
	typo := write("typo.yaml", "tokens: [{tenant: acme, token: acme-token-0123456789, event_types: [\"*\"], routes: [b]}]\n")
	noRoutes := write("open.yaml", "tokens: [{tenant: acme, token: acme-token-0123456789, event_types: [\"*\"]}]\n")
	badKeys := write("badkeys.yaml", "keys: [{id: k1, secret: c2hvcnQ=}]\n")
	base := "kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest, tenant_keys_file: %KEYS%}\n" +
		"routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]\n" +
		"postgres: {url: \"postgres://127.0.0.1/d\"}\n"
	cfg := func(keysFile, ingress string) string {
		return write("dedup.yaml", strings.Replace(base, "%KEYS%", keysFile, 1)+"ingress: "+ingress+"\n")
	}
	if code, _, err := dedup("validate", "--config", cfg(keys, `{listen: "0.0.0.0:8080", tokens_file: `+good+`}`)); code != 0 {
		t.Fatalf("a good config: %d %s", code, err)
	}
	for _, c := range []struct{ keys, ingress, want string }{
		{keys, `{listen: "0.0.0.0:8080"}`, "ingress.listen"},
		{keys, `{listen: "0.0.0.0:8080", tokens_file: ` + typo + `}`, `no route has the ID "b"`},
		{keys, `{listen: "0.0.0.0:8080", tokens_file: ` + noRoutes + `}`, "routes: missing"},
		{keys, `{listen: "0.0.0.0:8080", tokens_file: ` + filepath.Join(dir, "missing") + `}`, "ingress.tokens_file"},
		{badKeys, `{listen: "0.0.0.0:8080", tokens_file: ` + good + `}`, "kafka.tenant_keys_file"},
		{keys, `{public_url: "https://user:hunter2@events.example.com"}`, "ingress.public_url"},
	} {
		code, _, err := dedup("validate", "--config", cfg(c.keys, c.ingress))
		if code != 2 || !strings.Contains(err, c.want) {
			t.Errorf("ingress %s: %d %s, want an error naming %s", c.ingress, code, err, c.want)
		}
		if strings.Contains(err, "hunter2") {
			t.Errorf("the error shows the public_url's password: %v", err)
		}
	}
}

// A file written for `dedup worker` alone (no kafka section, no routes)
// is checked as the worker reads it with --worker: its own sections,
// naming the field, and what the worker checks before it dials
// (postgres.url's pooler rule, temporal's TLS files). Without --worker,
// the router's check refuses it, and its error says how to check it.
func TestValidateWorkerChecksAWorkerOnlyFileAsTheWorkerReadsIt(t *testing.T) {
	dir := t.TempDir()
	write := func(content string) string {
		t.Helper()
		p := filepath.Join(dir, "worker.yaml")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const workerOnly = "postgres: {url: \"postgres://u@127.0.0.1/d\"}\n" +
		"temporal: {host_port: \"127.0.0.1:7233\", namespace: default}\n"
	good := write(workerOnly + "worker: {task_queue: activities}\n")
	code, out, errOut := dedup("validate", "--worker", "--config", good)
	if code != 0 || !strings.Contains(out, "ok") || !strings.Contains(out, "activities") {
		t.Fatalf("validate --worker of a worker-only file: %d %q %q, want ok naming its task queue", code, out, errOut)
	}
	code, out, errOut = dedup("validate", "--worker", "--output", "json", "--config", good)
	if code != 0 || !strings.Contains(out, `"for": "worker"`) || !strings.Contains(out, `"task_queue": "activities"`) {
		t.Fatalf("validate --worker --output json: %d %q %q", code, out, errOut)
	}
	// Without --worker: the router's check refuses it and says how to
	// check the file for the worker.
	code, _, errOut = dedup("validate", "--config", good)
	if code != 2 || !strings.Contains(errOut, "kafka") || !strings.Contains(errOut, "dedup validate --worker") {
		t.Fatalf("validate of a worker-only file: %d %q, want exit 2 naming kafka and --worker", code, errOut)
	}
	// A router's file with a bad kafka setting gets the router's error
	// alone: it is no worker's file.
	code, _, errOut = dedup("validate", "--config", write(workerOnly+"kafka: {group: g, topics: [t], reset_offset: earliest}\n"+
		"routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]\n"))
	if code != 2 || !strings.Contains(errOut, "kafka.brokers") || strings.Contains(errOut, "--worker") {
		t.Fatalf("validate of a router's file without brokers: %d %q, want exit 2 naming kafka.brokers, not --worker", code, errOut)
	}
	for _, c := range []struct{ file, want string }{
		{workerOnly + "worker: {stop_timeout: -1s}\n", "worker.stop_timeout"},
		{workerOnly + "worker: {nosuchkey: 1}\n", "nosuchkey"},
		{"postgres: {url: \"postgres://u@127.0.0.1/d?statement_timeout=5000\", pooler: transaction}\n", "statement_timeout"},
		{"postgres: {url: \"postgres://u@127.0.0.1/d\"}\ntemporal: {host_port: \"127.0.0.1:7233\", tls: {ca_file: " + filepath.Join(dir, "missing.pem") + "}}\n", "temporal.tls"},
	} {
		code, _, errOut := dedup("validate", "--worker", "--config", write(c.file))
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("validate --worker of %q: %d %q, want exit 2 naming %s", c.file, code, errOut, c.want)
		}
		if strings.Contains(errOut, "dedup validate --worker") {
			t.Errorf("validate --worker of %q suggests --worker: %q", c.file, errOut)
		}
	}
}

// dedup worker listens on worker.admin_listen first, before it dials
// PostgreSQL or Temporal (app.RunWorker, serveAdmin): an address it cannot
// listen on stops it at start. validate --worker refuses that file too,
// naming worker.admin_listen, with exit code 2.
func TestValidateWorkerRefusesAnAdminListenTheWorkerCannotListenOn(t *testing.T) {
	p := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(p, []byte("postgres: {url: \"postgres://u@127.0.0.1/d\"}\n"+
		"temporal: {host_port: \"127.0.0.1:7233\", namespace: default}\n"+
		"worker: {task_queue: activities, admin_listen: nonsense}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The worker refuses it at start, before it dials anything.
	code, _, errOut := dedup("worker", "--config", p)
	if code == 0 || !strings.Contains(errOut, "worker.admin_listen") {
		t.Fatalf("dedup worker: %d %q, want it refused at start naming worker.admin_listen", code, errOut)
	}
	code, out, errOut := dedup("validate", "--worker", "--config", p)
	if code != 2 || !strings.Contains(errOut, "worker.admin_listen") {
		t.Errorf("validate --worker of a file the worker refuses at start (%s): %d %q %q, want exit 2 naming worker.admin_listen", "admin_listen: nonsense", code, out, errOut)
	}
}

// dedup worker reads the files its sections name at start: the tenants'
// mail password (worker.tenants.smtp.password_file) and the mail server's
// CA (worker.tenants.smtp.tls, tenants.New), and the tracing exporter's
// headers (tracing.otlp.headers_file, otlp.New); a missing or malformed
// one stops it. validate --worker, which checks the file as the worker
// reads it, refuses them too, naming the setting, with exit code 2.
func TestValidateWorkerReadsTheFilesTheWorkerReadsAtStart(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	badHeaders := filepath.Join(dir, "headers")
	if err := os.WriteFile(badHeaders, []byte("no colon here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const base = "postgres: {url: \"postgres://u@127.0.0.1/d\"}\n" +
		"temporal: {host_port: \"127.0.0.1:7233\", namespace: default}\n"
	for _, c := range []struct{ file, want string }{
		{base + "worker: {task_queue: q, tenants: {enabled: true, smtp: {host: 127.0.0.1, port: 25, from: hello@example.com, username: u, password_file: " + missing + "}}}\n",
			"worker.tenants.smtp.password_file"},
		{base + "worker: {task_queue: q, tenants: {enabled: true, smtp: {host: mail.example.com, port: 587, from: hello@example.com, tls: {ca_file: " + missing + "}}}}\n",
			"worker.tenants.smtp.tls"},
		{base + "worker: {task_queue: q}\ntracing: {exporter: otlp, otlp: {endpoint: \"collector.example.com:4317\", headers_file: " + missing + "}}\n",
			"tracing.otlp.headers_file"},
		{base + "worker: {task_queue: q}\ntracing: {exporter: otlp, otlp: {endpoint: \"collector.example.com:4317\", headers_file: " + badHeaders + "}}\n",
			"tracing.otlp.headers_file"},
	} {
		p := filepath.Join(dir, "worker.yaml")
		if err := os.WriteFile(p, []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		// What the worker does with the file at start (app.RunWorker:
		// workerTasks' tenants.New, startTracing's otlp.New) refuses it.
		cfg, err := config.LoadWorker(p)
		if err != nil {
			t.Fatalf("LoadWorker(%q): %v", c.file, err)
		}
		var startErr error
		if cfg.Worker.Tenants.Enabled {
			_, startErr = tenants.NewMailer(cfg.Worker.Tenants.SMTP, "worker.tenants.smtp")
		} else {
			_, startErr = otlp.New(context.Background(), cfg.Tracing, "dedup-worker")
		}
		if startErr == nil || !strings.Contains(startErr.Error(), c.want) {
			t.Fatalf("the worker's start with %q: %v, want an error naming %s", c.file, startErr, c.want)
		}
		code, out, errOut := dedup("validate", "--worker", "--config", p)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("validate --worker of a file the worker refuses at start (%v): %d %q %q, want exit 2 naming %s", startErr, code, out, errOut, c.want)
		}
	}
}

// Plain validate's hint on a worker-only file says "the file is valid for
// dedup worker". It may say so only of a file validate --worker accepts:
// one whose temporal.api_key_file or temporal.tls files are missing is
// refused by validate --worker (and by the worker at start), and the hint
// must not call it valid.
func TestValidateSaysTheFileIsValidForTheWorkerOnlyWhenValidateWorkerAcceptsIt(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	for _, temporal := range []string{
		"temporal: {host_port: \"127.0.0.1:7233\", api_key_file: " + missing + "}\n",
		"temporal: {host_port: \"127.0.0.1:7233\", tls: {ca_file: " + missing + "}}\n",
	} {
		p := filepath.Join(dir, "worker.yaml")
		if err := os.WriteFile(p, []byte("postgres: {url: \"postgres://u@127.0.0.1/d\"}\n"+temporal), 0o600); err != nil {
			t.Fatal(err)
		}
		wcode, _, werr := dedup("validate", "--worker", "--config", p)
		if wcode != 2 {
			t.Fatalf("validate --worker of %q: %d %q, want exit 2", temporal, wcode, werr)
		}
		code, _, errOut := dedup("validate", "--config", p)
		if code != 2 || strings.Contains(errOut, "valid for dedup worker") {
			t.Errorf("validate of a worker-only file that validate --worker refuses (%q): %d %q, want exit 2 without calling it valid for dedup worker", strings.TrimSpace(werr), code, errOut)
		}
	}
}

// dedup worker waits for PostgreSQL and Temporal with the retry section's
// backoff (app.RunWorker: deps.waitFor, cfg.Retry), which config.LoadWorker
// did not check: with retry.initial: -1s it panicked the first time a
// dependency was down at start (rand.N of a negative), and with 0 it
// retried without a pause. The router's check (config.Load) refuses both
// ("want 0 < initial <= max"). dedup worker now refuses them at start,
// and validate --worker, which says the file is fit for dedup worker,
// refuses them too, naming retry, with exit code 2.
func TestValidateWorkerRefusesARetrySectionTheWorkerCannotWaitWith(t *testing.T) {
	dir := t.TempDir()
	const base = "postgres: {url: \"postgres://u@127.0.0.1:1/d\"}\n" +
		"temporal: {host_port: \"127.0.0.1:1\", namespace: default}\n" +
		"worker: {task_queue: q, admin_listen: \"127.0.0.1:0\"}\n"
	for _, retry := range []string{"retry: {initial: -1s}\n", "retry: {initial: 0s}\n", "retry: {initial: 10s, max: 1ms}\n"} {
		p := filepath.Join(dir, "worker.yaml")
		if err := os.WriteFile(p, []byte(base+retry), 0o600); err != nil {
			t.Fatal(err)
		}
		// The router's check of the same section, in a router's file.
		router := filepath.Join(dir, "router.yaml")
		if err := os.WriteFile(router, []byte(base+retry+"kafka: {brokers: [b:9092], group: g, topics: [t], reset_offset: earliest}\n"+
			"routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := config.Load(router); err == nil || !strings.Contains(err.Error(), "retry") {
			t.Fatalf("the router's check of %q: %v, want it refused naming retry", retry, err)
		}
		// dedup worker refuses it at start, before it dials (it panicked
		// on -1s once PostgreSQL was found down).
		if code, _, errOut := dedup("worker", "--config", p); code != 2 || !strings.Contains(errOut, "retry") {
			t.Errorf("dedup worker with %q: %d %q, want exit 2 naming retry", strings.TrimSpace(retry), code, errOut)
		}
		code, out, errOut := dedup("validate", "--worker", "--config", p)
		if code != 2 || !strings.Contains(errOut, "retry") {
			t.Errorf("validate --worker of a file whose %q the worker cannot wait with: %d %q %q, want exit 2 naming retry", strings.TrimSpace(retry), code, out, errOut)
		}
	}
}

// dedup worker listens on worker.admin_listen first (serveAdmin): a host
// that is no IP and no host name ("*:9465", the all-interfaces form of
// other servers; Go's resolver refuses it without asking DNS) stops it at
// start, before it dials anything. validate --worker, which checks
// admin_listen's form, accepts it: it must refuse it, naming
// worker.admin_listen, with exit code 2.
func TestValidateWorkerRefusesAnAdminListenHostTheWorkerCannotListenOn(t *testing.T) {
	p := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(p, []byte("postgres: {url: \"postgres://u@127.0.0.1/d\"}\n"+
		"temporal: {host_port: \"127.0.0.1:7233\", namespace: default}\n"+
		"worker: {task_queue: activities, admin_listen: \"*:0\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := dedup("worker", "--config", p)
	if code == 0 || !strings.Contains(errOut, "worker.admin_listen") {
		t.Fatalf("dedup worker: %d %q, want it refused at start naming worker.admin_listen", code, errOut)
	}
	code, out, errOut := dedup("validate", "--worker", "--config", p)
	if code != 2 || !strings.Contains(errOut, "worker.admin_listen") {
		t.Errorf("validate --worker of a file the worker refuses at start (%s): %d %q %q, want exit 2 naming worker.admin_listen", "admin_listen: \"*:0\"", code, out, errOut)
	}
}

// validate --worker's errors never show a password: postgres.url's is
// kept out of its errors; so must be one in tracing.otlp.endpoint's user
// info ("https://user:password@collector/..."), which the refusal of an
// endpoint with no host quotes whole.
func TestValidateWorkerDoesNotShowTheTracingEndpointsPassword(t *testing.T) {
	p := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(p, []byte("postgres: {url: \"postgres://u@127.0.0.1/d\"}\n"+
		"temporal: {host_port: \"127.0.0.1:7233\", namespace: default}\n"+
		"worker: {task_queue: activities}\n"+
		"tracing: {exporter: otlp, otlp: {endpoint: \"https://user:hunter2@/v1/traces\"}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"validate", "--worker", "--config", p}, {"validate", "--worker", "--output", "json", "--config", p}} {
		code, out, errOut := dedup(args...)
		if code != 2 || !strings.Contains(out+errOut, "tracing.otlp.endpoint") {
			t.Errorf("%v: %d %q %q, want exit 2 naming tracing.otlp.endpoint", args, code, out, errOut)
		}
		if strings.Contains(out+errOut, "hunter2") {
			t.Errorf("%v shows the endpoint's password: %q %q", args, out, errOut)
		}
	}
}

// validate --worker never shows a value a ${VAR} gave, as the config
// loader's own errors do not (config.redactValues: it may be a secret put
// in the wrong key). The checks CheckWorker adds read files and an address
// the file names: a secret given to one of those keys by mistake (the
// headers themselves to headers_file, the API key to api_key_file, the
// password to password_file) must not be quoted in the refusal.
func TestValidateWorkerDoesNotShowAValueFromAVariable(t *testing.T) {
	t.Setenv("DEDUP_TEST_HEADERS", "authorization: Bearer s3cretHdr")
	t.Setenv("DEDUP_TEST_API_KEY", "tk_s3cretKey")
	t.Setenv("DEDUP_TEST_SMTP_PASSWORD", "s3cretSmtp")
	t.Setenv("DEDUP_TEST_ADMIN", "s3cretAdmin")
	const base = "postgres: {url: \"postgres://u@127.0.0.1/d\"}\n"
	const temporal = "temporal: {host_port: \"127.0.0.1:7233\", namespace: default}\n"
	for _, c := range []struct{ file, want, secret string }{
		{base + temporal + "worker: {task_queue: q}\ntracing: {exporter: otlp, otlp: {endpoint: \"collector.example.com:4317\", headers_file: \"${DEDUP_TEST_HEADERS}\"}}\n",
			"tracing.otlp.headers_file", "s3cretHdr"},
		{base + "temporal: {host_port: \"127.0.0.1:7233\", namespace: default, api_key_file: \"${DEDUP_TEST_API_KEY}\"}\nworker: {task_queue: q}\n",
			"temporal.api_key_file", "s3cretKey"},
		{base + temporal + "worker: {task_queue: q, tenants: {enabled: true, smtp: {host: 127.0.0.1, port: 25, from: hello@example.com, username: u, password_file: \"${DEDUP_TEST_SMTP_PASSWORD}\"}}}\n",
			"worker.tenants.smtp.password_file", "s3cretSmtp"},
		{base + temporal + "worker: {task_queue: q, admin_listen: \"${DEDUP_TEST_ADMIN}\"}\n",
			"worker.admin_listen", "s3cretAdmin"},
	} {
		p := filepath.Join(t.TempDir(), "worker.yaml")
		if err := os.WriteFile(p, []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"validate", "--worker", "--config", p}, {"validate", "--worker", "--output", "json", "--config", p}} {
			code, out, errOut := dedup(args...)
			if code != 2 || !strings.Contains(out+errOut, c.want) {
				t.Errorf("%s: %v: %d %q %q, want exit 2 naming %s", c.want, args[1:3], code, out, errOut, c.want)
			}
			if strings.Contains(out+errOut, c.secret) {
				t.Errorf("%s: %v shows the value a ${VAR} gave: %q %q", c.want, args[1:3], out, errOut)
			}
		}
	}
}

// dedup run, dedup worker and dedup ingress never show a value a ${VAR}
// gave in the error they stop with, nor does validate in the checks it
// makes as the ingress does (config.Redact): a secret put in a listen
// address by mistake fails at start, and the error names the setting, not
// the secret.
func TestRunWorkerAndIngressDoNotShowAValueFromAVariable(t *testing.T) {
	t.Setenv("DEDUP_TEST_LISTEN", "s3cretListen")
	const router = "kafka: {brokers: [\"127.0.0.1:1\"], group: g, topics: [t], reset_offset: earliest}\n" +
		"routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]\n" +
		"postgres: {url: \"postgres://u@127.0.0.1:1/d\"}\n"
	const worker = "postgres: {url: \"postgres://u@127.0.0.1:1/d\"}\ntemporal: {host_port: \"127.0.0.1:1\", namespace: default}\n"
	for _, c := range []struct{ command, file, want string }{
		{"run", router + "admin: {listen: \"${DEDUP_TEST_LISTEN}\"}\n", "admin.listen"},
		{"worker", worker + "worker: {task_queue: q, admin_listen: \"${DEDUP_TEST_LISTEN}\"}\n", "worker.admin_listen"},
		{"ingress", router + "ingress: {listen: \"${DEDUP_TEST_LISTEN}\"}\n", "ingress.listen"},
		{"ingress", router + "ingress: {listen: \"127.0.0.1:0\", admin_listen: \"${DEDUP_TEST_LISTEN}\"}\n", "ingress.admin_listen"},
		{"validate", router + "ingress: {listen: \"${DEDUP_TEST_LISTEN}\"}\n", "ingress.listen"},
	} {
		p := filepath.Join(t.TempDir(), "dedup.yaml")
		if err := os.WriteFile(p, []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := dedup(c.command, "--config", p)
		if code == 0 || !strings.Contains(out+errOut, c.want) {
			t.Errorf("dedup %s with %s from a variable: %d %q %q, want a refusal naming %s", c.command, c.want, code, out, errOut, c.want)
		}
		if strings.Contains(out+errOut, "s3cretListen") {
			t.Errorf("dedup %s shows the value a ${VAR} gave %s: %q %q", c.command, c.want, out, errOut)
		}
	}
}

// A value a ${VAR} gave may hold a shorter one another ${VAR} gave
// earlier in the file (a group "router", a listen address
// "router-s3cret..." put there by mistake): dedup run's exit error must
// not show what is left of the longer value once the shorter is taken
// out.
func TestRunDoesNotShowTheRestOfAValueThatHoldsAnotherVariablesValue(t *testing.T) {
	t.Setenv("DEDUP_TEST_GROUP", "router")
	t.Setenv("DEDUP_TEST_LISTEN", "router-s3cretListen")
	file := "kafka: {brokers: [\"127.0.0.1:1\"], group: \"${DEDUP_TEST_GROUP}\", topics: [t], reset_offset: earliest}\n" +
		"routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]\n" +
		"postgres: {url: \"postgres://u@127.0.0.1:1/d\"}\n" +
		"admin: {listen: \"${DEDUP_TEST_LISTEN}\"}\n"
	p := filepath.Join(t.TempDir(), "dedup.yaml")
	if err := os.WriteFile(p, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := dedup("run", "--config", p)
	if code == 0 || !strings.Contains(out+errOut, "admin.listen") {
		t.Fatalf("dedup run with admin.listen from a variable: %d %q %q, want a refusal naming admin.listen", code, out, errOut)
	}
	if strings.Contains(out+errOut, "s3cretListen") {
		t.Errorf("dedup run shows part of the value a ${VAR} gave admin.listen: %q %q", out, errOut)
	}
}

// A value a ${VAR} gave with a character %q escapes (a quote, a tab),
// written into a setting with other text around it: the error quotes the
// setting whole, so the value is in it neither as is nor quoted alone,
// but escaped. dedup run must not show it that way either.
func TestRunDoesNotShowAnEscapedValueFromAVariable(t *testing.T) {
	t.Setenv("DEDUP_TEST_LISTEN", "s3cret\"Listen")
	file := "kafka: {brokers: [\"127.0.0.1:1\"], group: g, topics: [t], reset_offset: earliest}\n" +
		"routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]\n" +
		"postgres: {url: \"postgres://u@127.0.0.1:1/d\"}\n" +
		"admin: {listen: \"${DEDUP_TEST_LISTEN}:x\"}\n"
	p := filepath.Join(t.TempDir(), "dedup.yaml")
	if err := os.WriteFile(p, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := dedup("run", "--config", p)
	if code == 0 || !strings.Contains(out+errOut, "admin.listen") {
		t.Fatalf("dedup run with admin.listen from a variable: %d %q %q, want a refusal naming admin.listen", code, out, errOut)
	}
	if strings.Contains(out+errOut, "s3cret") {
		t.Errorf("dedup run shows the value a ${VAR} gave admin.listen, escaped: %q %q", out, errOut)
	}
}
