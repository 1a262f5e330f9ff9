// Package pgbouncer starts a real PgBouncer (the machine's pgbouncer
// binary: Debian's package, which .ci/deps installs) in a temporary
// directory, on a free loopback port, in front of a PostgreSQL server
// (a throwaway cluster, pgcluster), for tests. PgBouncer refuses to run as
// root, so it runs as user postgres when this process is root. Its pools
// are small on purpose: under transaction pooling two clients' transactions
// really do land on the same server connection, which is what breaks
// session state (prepared statements, session advisory locks, SET).
package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Mode is PgBouncer's pool_mode.
type Mode string

const (
	// Transaction gives a client a server connection for one transaction
	// only: what PgBouncer deployments mostly run.
	Transaction Mode = "transaction"
	// Session gives a client a server connection for its whole session.
	Session Mode = "session"
)

// Options tune the pooler.
type Options struct {
	// Mode is the pool_mode; "" is Transaction.
	Mode Mode
	// PoolSize is default_pool_size: server connections per database and
	// user. 0: 2 under Transaction (so that clients share them), 40 under
	// Session (a session holds one for as long as the client is
	// connected: fewer than the clients' pools hold would make them wait
	// for each other forever).
	PoolSize int
}

// Bouncer is a running PgBouncer.
type Bouncer struct {
	dir     string
	port    int
	backend *url.URL
	cmd     *exec.Cmd
	done    chan struct{}
	logPath string
}

// Start starts PgBouncer in front of the server of backendURL (a
// postgres:// URL with user postgres, as pgcluster's: every database of
// that server is reachable through it by name, auth trust) and stops it
// when the test ends. It fails the test when pgbouncer is not installed.
func Start(t testing.TB, backendURL string, o Options) *Bouncer {
	t.Helper()
	b, err := start(backendURL, o)
	if err != nil {
		t.Fatalf("starting pgbouncer: %v", err)
	}
	t.Cleanup(func() {
		if err := b.stop(); err != nil {
			t.Errorf("stopping pgbouncer: %v", err)
		}
	})
	return b
}

// URL is backendURL's connection string (its user and database) with
// PgBouncer's address in place of the server's.
func (b *Bouncer) URL(backendURL string) string {
	u, err := url.Parse(backendURL)
	if err != nil {
		return ""
	}
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	return u.String()
}

// Log is what PgBouncer logged so far (for a failing test's message).
func (b *Bouncer) Log() string {
	out, _ := os.ReadFile(b.logPath)
	return string(out)
}

func start(backendURL string, o Options) (*Bouncer, error) {
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	if o.Mode == "" {
		o.Mode = Transaction
	}
	if o.Mode != Transaction && o.Mode != Session {
		return nil, fmt.Errorf("mode %q: want transaction or session", o.Mode)
	}
	if o.PoolSize == 0 {
		o.PoolSize = 2
		if o.Mode == Session {
			o.PoolSize = 40
		}
	}
	bu, err := url.Parse(backendURL)
	if err != nil || bu.Scheme == "" {
		return nil, fmt.Errorf("backend URL: want postgres://user@host:port/db")
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("looking up user postgres (pgbouncer will not run as root): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	b := &Bouncer{backend: bu}
	if b.dir, err = os.MkdirTemp("", "dedup-pgbouncer-"); err != nil {
		return nil, fmt.Errorf("creating its directory: %w", err)
	}
	if cred != nil {
		if err := os.Chown(b.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(b.dir)
			return nil, fmt.Errorf("handing its directory to postgres: %w", err)
		}
	}
	user := bu.User.Username()
	if user == "" {
		user = "postgres"
	}
	b.logPath = filepath.Join(b.dir, "pgbouncer.log")
	// A port found free may be taken before PgBouncer listens on it (make
	// test runs two lanes of tests, each starting servers): then pick
	// again.
	for picks := 1; ; picks++ {
		if b.port, err = pickPort(); err != nil {
			_ = os.RemoveAll(b.dir)
			return nil, err
		}
		err = b.run(bin, bu, user, cred, o)
		if err == nil {
			return b, nil
		}
		_ = b.kill()
		if picks == 5 || !errors.Is(err, errPortHeld) {
			_ = os.RemoveAll(b.dir)
			return nil, err
		}
	}
}

// errPortHeld: another process listens on PgBouncer's port.
var errPortHeld = errors.New("the port is held by another process")

// run writes the config for b.port and starts PgBouncer on it, and waits
// until the PgBouncer that answers there is this one (its admin console
// names this one's log file).
func (b *Bouncer) run(bin string, bu *url.URL, user string, cred *syscall.Credential, o Options) error {
	authFile := filepath.Join(b.dir, "users.txt")
	// Debian's defaults otherwise (no ignore_startup_parameters, server
	// reset DISCARD ALL in session mode only): what a new user runs.
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s user=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 500
max_db_connections = 0
logfile = %s
pidfile = %s
admin_users = %s
`, bu.Hostname(), bu.Port(), user, b.port, authFile, o.Mode, o.PoolSize, b.logPath, filepath.Join(b.dir, "pgbouncer.pid"), user)
	cfg := filepath.Join(b.dir, "pgbouncer.ini")
	files := map[string]string{cfg: ini, authFile: fmt.Sprintf("%q \"\"\n", user), b.logPath: ""}
	for p, s := range files {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", filepath.Base(p), err)
		}
		if cred != nil {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return fmt.Errorf("handing %s to postgres: %w", filepath.Base(p), err)
			}
		}
	}
	cmd := exec.Command(bin, cfg)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.Dir = b.dir
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("running %s: %w", bin, err)
	}
	b.cmd, b.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(b.done) }()
	return b.waitReady(bu, user)
}

// waitReady waits until a query through PgBouncer reaches the server,
// and checks that the PgBouncer answering on b.port is this one: another
// that holds the port (this one then cannot listen) names another log
// file in its admin console.
func (b *Bouncer) waitReady(bu *url.URL, user string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		// Each attempt is bounded: a process that holds the port and is
		// not a PostgreSQL server (an HTTP server) may never answer the
		// startup message, while this PgBouncer, unable to listen, has
		// exited.
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		err := selectOne(actx, b.URL(bu.String()))
		acancel()
		if err == nil {
			// Something that speaks PostgreSQL answers: this PgBouncer
			// only if its admin console names this one's log file (a
			// PostgreSQL server has no database pgbouncer).
			actx, acancel := context.WithTimeout(ctx, 5*time.Second)
			logfile, aerr := b.answeringLogfile(actx, user)
			acancel()
			switch {
			case aerr != nil:
				return fmt.Errorf("starting pgbouncer on 127.0.0.1:%d: %w: what answers there has no PgBouncer admin console (%v)", b.port, errPortHeld, aerr)
			case logfile != b.logPath:
				return fmt.Errorf("starting pgbouncer on 127.0.0.1:%d: %w: a PgBouncer logging to %s answers there", b.port, errPortHeld, logfile)
			}
			return nil
		}
		select {
		case <-b.done:
			b.cmd = nil
			if held := portHeld(b.port); held != nil {
				return fmt.Errorf("pgbouncer exited while starting on 127.0.0.1:%d: %w (%v): %v", b.port, errPortHeld, held, err)
			}
			return fmt.Errorf("pgbouncer exited while starting: %v: %s", err, b.Log())
		case <-ctx.Done():
			return fmt.Errorf("pgbouncer not ready after 30s: %v: %s", err, b.Log())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// selectOne runs SELECT 1 through url.
func selectOne(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	_, err = conn.Exec(ctx, "SELECT 1")
	return err
}

// answeringLogfile is the log file of the PgBouncer that answers on
// b.port (SHOW CONFIG on its admin console).
func (b *Bouncer) answeringLogfile(ctx context.Context, user string) (string, error) {
	admin := url.URL{Scheme: "postgres", User: url.User(user), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)), Path: "/pgbouncer",
		RawQuery: "sslmode=disable"}
	conn, err := pgconn.Connect(ctx, admin.String())
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close(ctx) }()
	rs, err := conn.Exec(ctx, "SHOW CONFIG").ReadAll()
	if err != nil {
		return "", err
	}
	for _, r := range rs {
		for _, row := range r.Rows {
			if len(row) >= 2 && string(row[0]) == "logfile" {
				return string(row[1]), nil
			}
		}
	}
	return "", errors.New("SHOW CONFIG has no logfile")
}

// portHeld is the error of listening on 127.0.0.1:port, nil if it is free.
func portHeld(port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
}

// kill ends PgBouncer at once, if it runs, and waits for it to exit.
func (b *Bouncer) kill() error {
	if b.cmd == nil {
		return nil
	}
	err := b.cmd.Process.Kill()
	<-b.done
	b.cmd = nil
	return err
}

// stop ends PgBouncer (SIGTERM: at once, closing every connection) and
// removes its directory.
func (b *Bouncer) stop() error {
	if b.cmd != nil {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(10 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.done
		}
		b.cmd = nil
	}
	return os.RemoveAll(b.dir)
}

// binary finds pgbouncer on PATH or in /usr/sbin (where Debian puts it,
// off a normal user's PATH).
func binary() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", errors.New("no pgbouncer on PATH or in /usr/sbin: install it (apt-get install pgbouncer; .ci/deps does)")
}

// pickPort is freePort; tests replace it.
var pickPort = freePort

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
