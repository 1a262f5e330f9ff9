package tenants

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/worker"
	"github.com/dedupio/dedup/worker/idempotency"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// mailbox is a real SMTP server (go-smtp's server side) in front of a
// mailbox that, like a receiving mail system, keeps one message per
// Message-ID: it counts every delivery the server accepted and every
// message the mailbox kept, and notes whether each session was over TLS
// and who logged in.
type mailbox struct {
	mu         sync.Mutex
	deliveries int               // messages the server accepted (DATA answered 250)
	kept       map[string]string // Message-ID -> the message
	sessions   []sessionNote     // one per MAIL command
	logins     []string          // AUTH PLAIN attempts: user:password
	users      map[string]string // the accounts AUTH PLAIN accepts (nil: no AUTH)
	refuse     string            // a recipient answered 550
	addr       string
	port       int
}

type sessionNote struct {
	tls  bool
	user string
}

// mailboxOptions: TLS offers STARTTLS (or, implicit, speaks TLS from the
// first byte); users are the accounts AUTH PLAIN accepts (none: no AUTH).
type mailboxOptions struct {
	tls      *tls.Config
	implicit bool
	users    map[string]string
}

func newMailbox(t *testing.T) *mailbox { return newMailboxWith(t, mailboxOptions{}) }

func newMailboxWith(t *testing.T, o mailboxOptions) *mailbox {
	t.Helper()
	mb := &mailbox{kept: map[string]string{}, refuse: "nobody@example.com", users: o.users}
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		return &session{mb: mb, conn: c}, nil
	}))
	srv.Domain = "localhost"
	srv.AllowInsecureAuth = o.tls == nil // a server without TLS: the client must not care (loopback)
	var l net.Listener
	var err error
	if o.implicit {
		l, err = tls.Listen("tcp", "127.0.0.1:0", o.tls)
	} else {
		srv.TLSConfig = o.tls
		l, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		t.Fatal(err)
	}
	mb.addr = l.Addr().String()
	mb.port = l.Addr().(*net.TCPAddr).Port
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return mb
}

func (mb *mailbox) counts() (deliveries, kept int) {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return mb.deliveries, len(mb.kept)
}

type session struct {
	mb   *mailbox
	conn *smtp.Conn
	user string
	to   string
}

func (s *session) Reset()        {}
func (s *session) Logout() error { return nil }
func (s *session) AuthMechanisms() []string {
	if s.mb.users == nil {
		return nil
	}
	return []string{sasl.Plain}
}
func (s *session) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, password string) error {
		s.mb.mu.Lock()
		s.mb.logins = append(s.mb.logins, user+":"+password)
		p, ok := s.mb.users[user]
		s.mb.mu.Unlock()
		if !ok || p != password {
			return &smtp.SMTPError{Code: 535, EnhancedCode: smtp.EnhancedCode{5, 7, 8}, Message: "bad credentials"}
		}
		s.user = user
		return nil
	}), nil
}
func (s *session) Mail(string, *smtp.MailOptions) error {
	if s.mb.users != nil && s.user == "" {
		return &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "authentication required"}
	}
	_, secure := s.conn.TLSConnectionState()
	s.mb.mu.Lock()
	s.mb.sessions = append(s.mb.sessions, sessionNote{tls: secure, user: s.user})
	s.mb.mu.Unlock()
	return nil
}
func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if to == s.mb.refuse {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"}
	}
	s.to = to
	return nil
}
func (s *session) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	m, err := mail.ReadMessage(strings.NewReader(string(b)))
	if err != nil {
		return err
	}
	s.mb.mu.Lock()
	defer s.mb.mu.Unlock()
	s.mb.deliveries++
	if id := m.Header.Get("Message-ID"); s.mb.kept[id] == "" {
		s.mb.kept[id] = string(b)
	}
	return nil
}

// smtpTo is the section for a plaintext mailbox on loopback.
func smtpTo(mb *mailbox) SMTPConfig {
	return SMTPConfig{Host: "127.0.0.1", Port: mb.port, From: "hello@dedup.example"}
}

// lab runs the tenant task types through the worker's RunTask activity
// (the SDK's test activity environment; PostgreSQL and SMTP are real).
type lab struct {
	t       *testing.T
	pool    *pgxpool.Pool
	mb      *mailbox
	tenants *Tenants
	acts    *worker.Activities
	env     *testsuite.TestActivityEnvironment
}

func newLab(t *testing.T) *lab {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	// Bound: a lock wait of the lab's sessions (the migrations' guard, a
	// concurrent attempt's) fails after a minute with its error instead of
	// hanging the test, and the pool's Close with it; an uncontended wait
	// takes milliseconds.
	pc.ConnConfig.RuntimeParams["lock_timeout"] = "60s"
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := Setup(ctx, pool); err != nil {
		t.Fatal(err)
	}
	keys, err := idempotency.New(pool, idempotency.DefaultOptions(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := &lab{t: t, pool: pool, mb: newMailbox(t)}
	l.tenants, err = New(pool, Config{Enabled: true, SMTP: smtpTo(l.mb)}, "worker.tenants")
	if err != nil {
		t.Fatal(err)
	}
	l.acts = &worker.Activities{Pool: pool, Keys: keys, Tasks: l.tenants.TaskTypes()}
	var s testsuite.WorkflowTestSuite
	l.env = s.NewTestActivityEnvironment()
	l.env.RegisterActivity(l.acts)
	return l
}

var acme = Tenant{ID: "acme", Name: "Acme", Email: "owner@acme.example"}

// run runs one attempt of the task (index 0 of the run of event evt-1).
func (l *lab) run(taskType string, tenant Tenant, out any) error {
	data, _ := json.Marshal(tenant)
	wf := "activity-onboarding:evt-1"
	run := worker.RunID(wf)
	v, err := l.env.ExecuteActivity(l.acts.RunTask, worker.TaskInput{ID: worker.TaskID(run, taskType, 0), RunID: run, Type: taskType,
		Event: schemas.WorkflowInput{WorkflowID: wf, ActivityID: "onboarding", EventID: "evt-1", Data: data}})
	if err != nil {
		return err
	}
	return v.Get(out)
}

// retried runs the task three times (a first attempt and two retries) and
// requires the same result from each.
func retried[T comparable](l *lab, taskType string, tenant Tenant) T {
	l.t.Helper()
	var first T
	for i := 0; i < 3; i++ {
		var got T
		if err := l.run(taskType, tenant, &got); err != nil {
			l.t.Fatalf("%s attempt %d: %v", taskType, i+1, err)
		}
		if i == 0 {
			first = got
		} else if got != first {
			l.t.Fatalf("%s attempt %d: %+v, want the first attempt's %+v", taskType, i+1, got, first)
		}
	}
	return first
}

func (l *lab) count(sql string, args ...any) int {
	l.t.Helper()
	var n int
	if err := l.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		l.t.Fatal(err)
	}
	return n
}

func TestCreateTenantSchemaRetried(t *testing.T) {
	l := newLab(t)
	res := retried[SchemaResult](l, "create_tenant_schema", acme)
	if res.Schema != "tenant_acme" || l.count(`SELECT count(*) FROM pg_namespace WHERE nspname = 'tenant_acme'`) != 1 {
		t.Fatalf("result %+v; want the schema tenant_acme, once", res)
	}
	if n := l.count(`SELECT count(*) FROM tenants WHERE id = 'acme' AND email = $1 AND deleted_at IS NULL`, acme.Email); n != 1 {
		t.Fatalf("%d tenant rows, want the tenant recorded once", n)
	}
}

// A name or address that would break out of its header fails the task
// for good, before anything is sent.
func TestSendWelcomeEmailRefusesHeaderInjection(t *testing.T) {
	l := newLab(t)
	for _, bad := range []Tenant{
		{ID: "evil", Name: "Evil\r\nBcc: victim@example.com", Email: "owner@evil.example"},
		{ID: "evil", Name: "Evil", Email: "owner@evil.example\r\nBcc: victim@example.com"},
		{ID: "evil", Name: "Evil", Email: "Evil <owner@evil.example>"},
	} {
		var res EmailResult
		err := l.run("send_welcome_email", bad, &res)
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || !app.NonRetryable() {
			t.Errorf("%+v: %v, want a permanent failure", bad, err)
		}
	}
	if d, _ := l.mb.counts(); d != 0 {
		t.Fatalf("%d deliveries", d)
	}
}

func TestRunMigrationsRetried(t *testing.T) {
	l := newLab(t)
	res := retried[MigrationResult](l, "run_migrations", acme)
	if res != (MigrationResult{Schema: "tenant_acme", Version: 3}) {
		t.Fatalf("result %+v", res)
	}
	// Version 3 inserts a row: applied once, however often the task ran.
	if n := l.count(`SELECT count(*) FROM tenant_acme.projects`); n != 1 {
		t.Fatalf("%d projects, want 1 (migration 3 applied once)", n)
	}
	if n := l.count(`SELECT count(*) FROM tenant_acme.schema_migrations`); n != 3 {
		t.Fatalf("%d applied versions, want 3", n)
	}
}

// Two attempts at once (an attempt that timed out still running next to
// its retry): the guard lets one apply, the other finds it done.
func TestRunMigrationsConcurrent(t *testing.T) {
	l := newLab(t)
	other := newLabOn(t, l)
	var wg sync.WaitGroup
	var r1, r2 MigrationResult
	var e1, e2 error
	wg.Add(2)
	go func() { defer wg.Done(); e1 = l.run("run_migrations", acme, &r1) }()
	go func() { defer wg.Done(); e2 = other.run("run_migrations", acme, &r2) }()
	wg.Wait()
	if e1 != nil || e2 != nil || r1 != r2 {
		t.Fatalf("concurrent attempts: %+v %v / %+v %v", r1, e1, r2, e2)
	}
	if n := l.count(`SELECT count(*) FROM tenant_acme.projects`); n != 1 {
		t.Fatalf("%d projects, want 1", n)
	}
}

// newLabOn is a second activity environment on l's database and mailbox.
func newLabOn(t *testing.T, l *lab) *lab {
	var s testsuite.WorkflowTestSuite
	o := *l
	o.env = s.NewTestActivityEnvironment()
	o.env.RegisterActivity(o.acts)
	return &o
}

func TestSendWelcomeEmailRetried(t *testing.T) {
	l := newLab(t)
	res := retried[EmailResult](l, "send_welcome_email", acme)
	deliveries, kept := l.mb.counts()
	if deliveries != 1 || kept != 1 || res.To != acme.Email || l.mb.kept[res.MessageID] == "" {
		t.Fatalf("result %+v; %d deliveries, %d kept; want one email with the result's Message-ID", res, deliveries, kept)
	}
	if !strings.Contains(l.mb.kept[res.MessageID], "X-Idempotency-Key: task-") {
		t.Fatalf("the email carries no idempotency key:\n%s", l.mb.kept[res.MessageID])
	}
}

// The mail server accepted the message, then the attempt failed before the
// outcome was stored (as a crash there would): the retry sends again, with
// the same Message-ID, and the mailbox keeps one email. This is the one
// repeat the key store cannot prevent; the key handed to the outside
// (the Message-ID) is what lets the receiving side drop it.
func TestSendWelcomeEmailCrashAfterSend(t *testing.T) {
	l := newLab(t)
	crashes := 1
	l.tenants.afterSend = func() error {
		if crashes > 0 {
			crashes--
			return errors.New("injected: the worker died after the server took the message")
		}
		return nil
	}
	var first EmailResult
	if err := l.run("send_welcome_email", acme, &first); err == nil {
		t.Fatal("the first attempt did not fail")
	}
	res := retried[EmailResult](l, "send_welcome_email", acme)
	deliveries, kept := l.mb.counts()
	if deliveries != 2 || kept != 1 || l.mb.kept[res.MessageID] == "" {
		t.Fatalf("%d deliveries, %d kept; want 2 deliveries (one repeat after the crash) and one email kept under %s", deliveries, kept, res.MessageID)
	}
}

// A recipient refused for good (550) fails the task at once, and no retry
// talks to the server again.
func TestSendWelcomeEmailRefused(t *testing.T) {
	l := newLab(t)
	nobody := Tenant{ID: "ghost", Name: "Ghost", Email: "nobody@example.com"}
	for i := 0; i < 2; i++ {
		var res EmailResult
		err := l.run("send_welcome_email", nobody, &res)
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || !app.NonRetryable() || !strings.Contains(err.Error(), "550") {
			t.Fatalf("attempt %d: %v, want a non-retryable 550", i+1, err)
		}
	}
	if deliveries, _ := l.mb.counts(); deliveries != 0 {
		t.Fatalf("%d deliveries", deliveries)
	}
}

func TestDropTenantSchemaRetried(t *testing.T) {
	l := newLab(t)
	var created SchemaResult
	if err := l.run("create_tenant_schema", acme, &created); err != nil {
		t.Fatal(err)
	}
	res := retried[DropResult](l, "drop_tenant_schema", acme)
	if res != (DropResult{Schema: "tenant_acme", Dropped: true}) || l.count(`SELECT count(*) FROM pg_namespace WHERE nspname = 'tenant_acme'`) != 0 {
		t.Fatalf("result %+v; want the schema gone", res)
	}
}

func TestSoftDeleteTenantRetried(t *testing.T) {
	l := newLab(t)
	if _, err := l.pool.Exec(context.Background(), `INSERT INTO tenants (id, name, email) VALUES ($1, $2, $3)`, acme.ID, acme.Name, acme.Email); err != nil {
		t.Fatal(err)
	}
	res := retried[DeleteResult](l, "soft_delete_tenant", acme)
	if res.TenantID != "acme" || res.DeletedAt.IsZero() || l.count(`SELECT count(*) FROM tenants WHERE id = 'acme' AND deleted_at = $1`, res.DeletedAt) != 1 {
		t.Fatalf("result %+v; want the tenant deleted at the result's time", res)
	}
	var out DeleteResult
	err := l.run("soft_delete_tenant", Tenant{ID: "nope"}, &out)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || !app.NonRetryable() {
		t.Fatalf("an unknown tenant: %v, want a permanent failure", err)
	}
}
