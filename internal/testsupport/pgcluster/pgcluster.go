// Package pgcluster starts a throwaway PostgreSQL cluster in a temporary
// directory, for tests and the dev stack. It runs the machine's initdb and
// postgres binaries (PostgreSQL refuses to run as root, so as user postgres
// when this process is root) and removes everything on Stop.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options tune the cluster.
type Options struct {
	// Port to listen on, 127.0.0.1 only; 0 picks a free one.
	Port int
	// Durable keeps fsync on. Tests and the dev stack leave it off: the data
	// is thrown away anyway, and fsync on a shared CI disk makes timings
	// noise. Benchmarks turn it on. synchronous_commit stays on either way,
	// so a committed transaction survives the server process being killed
	// (pg_ctl stop -m immediate), if not the machine crashing.
	Durable bool
	// Settings are more server settings, name=value each (passed as -c),
	// after the defaults: shared_buffers=4GB replaces 256MB.
	Settings []string
	// Log receives the server's output; nil discards it.
	Log *os.File
	// TLS, when set, turns ssl on with this server certificate and key.
	// Connections without TLS are still accepted (sslmode decides).
	TLS *TLS
}

// TLS is the server's certificate (with its chain) and private key, PEM.
type TLS struct {
	CertPEM, KeyPEM []byte
}

// Cluster is a running throwaway cluster.
type Cluster struct {
	dir  string
	bin  string
	port int
	cred *syscall.Credential
	cmd  *exec.Cmd
	opts Options
	done chan struct{}
}

// URL is the connection string of database postgres as user postgres.
func (c *Cluster) URL() string { return c.DatabaseURL("postgres") }

// DatabaseURL is the connection string of database name.
func (c *Cluster) DatabaseURL(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, name)
}

// DataDir is where the cluster lives (for pg_ctl).
func (c *Cluster) DataDir() string { return c.dir }

// Start runs initdb into a temporary directory and starts postgres on it.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, opts: opts, port: opts.Port}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("looking up user postgres (PostgreSQL will not run as root; install the postgresql package, which creates it): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if c.dir, err = os.MkdirTemp("", "dedup-pg-"); err != nil {
		return nil, fmt.Errorf("creating data directory: %w", err)
	}
	if c.cred != nil {
		if err := os.Chown(c.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			_ = c.cleanup()
			return nil, fmt.Errorf("handing data directory to postgres: %w", err)
		}
	}
	initdb := c.command(filepath.Join(bin, "initdb"), "-D", c.dir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--locale=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = c.cleanup()
		return nil, fmt.Errorf("running initdb: %w: %s", err, out)
	}
	if opts.TLS != nil {
		if err := c.writeTLS(); err != nil {
			_ = c.cleanup()
			return nil, err
		}
	}
	if opts.Port != 0 { // the caller's port is kept: its error names it
		err = c.startServer(ctx)
	} else {
		err = c.startOnAFreePort(ctx)
	}
	if err != nil {
		_ = c.cleanup()
		return nil, err
	}
	return c, nil
}

// startOnAFreePort starts the server on a port found free. That port may
// be taken before the server listens on it (make test runs two lanes of
// tests, each starting servers): then it picks again.
func (c *Cluster) startOnAFreePort(ctx context.Context) error {
	for picks := 1; ; picks++ {
		var err error
		if c.port, err = pickPort(); err != nil {
			return err
		}
		err = c.startServer(ctx)
		if err == nil || picks == 5 || !errors.Is(err, errPortHeld) {
			return err
		}
	}
}

// errPortHeld: another process listens on the cluster's port.
var errPortHeld = errors.New("the port is held by another process")

// errExited: the server exited while it started, the port free by the
// time it was looked at.
var errExited = errors.New("postgres exited while starting")

func (c *Cluster) startServer(ctx context.Context) error {
	args := []string{"-D", c.dir, "-p", strconv.Itoa(c.port), "-k", c.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200",
		"-c", "shared_buffers=256MB", "-c", "max_wal_size=2GB",
		// Tests find a statement that waits for a lock by its text in
		// pg_stat_activity, which keeps the first 1024 bytes by default;
		// the ledger's statements are longer.
		"-c", "track_activity_query_size=16384"}
	for _, s := range c.opts.Settings {
		args = append(args, "-c", s)
	}
	if !c.opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off")
	}
	if c.opts.TLS != nil {
		args = append(args, "-c", "ssl=on", "-c", "ssl_cert_file=server.crt", "-c", "ssl_key_file=server.key")
	}
	cmd := c.command(filepath.Join(c.bin, "postgres"), args...)
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT // immediate shutdown if we die
	if c.opts.Log != nil {
		cmd.Stdout, cmd.Stderr = c.opts.Log, c.opts.Log
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	c.cmd, c.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(c.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		// Each attempt is bounded: a process that holds the port and is
		// not PostgreSQL (an HTTP server) may never answer the startup
		// message, while this server, unable to listen, has exited.
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		dir, err := answeringDataDirectory(actx, c.URL())
		cancel()
		// The server that answers may be another's that holds the port
		// (this one then cannot listen): its data directory says, in
		// PostgreSQL's canonical form (TMPDIR may not be: /tmp//).
		switch {
		case err == nil && filepath.Clean(dir) == filepath.Clean(c.dir):
			return nil
		case err == nil:
			c.kill()
			return fmt.Errorf("starting postgres on 127.0.0.1:%d: %w: a PostgreSQL server with data directory %s answers there", c.port, errPortHeld, dir)
		}
		select {
		case <-c.done:
			c.cmd = nil
			if held := portHeld(c.port); held != nil {
				return fmt.Errorf("postgres exited while starting on 127.0.0.1:%d: %w (%v): %v", c.port, errPortHeld, held, err)
			}
			return fmt.Errorf("%w: %w", errExited, err)
		case <-ctx.Done():
			c.kill()
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.kill()
			return fmt.Errorf("postgres not ready on 127.0.0.1:%d after 60s: %w", c.port, err)
		}
	}
}

// answeringDataDirectory is the data directory of the server that answers url.
func answeringDataDirectory(ctx context.Context, url string) (string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close(ctx) }()
	var dir string
	err = conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir)
	return dir, err
}

// writeTLS puts the certificate and key in the data directory, where
// ssl_cert_file and ssl_key_file find them (relative paths), readable only
// by the server's user as PostgreSQL demands of a key.
func (c *Cluster) writeTLS() error {
	for name, b := range map[string][]byte{"server.crt": c.opts.TLS.CertPEM, "server.key": c.opts.TLS.KeyPEM} {
		p := filepath.Join(c.dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
		if c.cred != nil {
			if err := os.Chown(p, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
				return fmt.Errorf("handing %s to postgres: %w", name, err)
			}
		}
	}
	return nil
}

// StopImmediate stops the server the way an operator pulling the plug
// would: `pg_ctl stop -m immediate` (no checkpoint; crash recovery on the
// next start). The data directory stays for Restart.
func (c *Cluster) StopImmediate() error {
	if c.cmd == nil {
		return errors.New("postgres is not running")
	}
	out, err := c.command(filepath.Join(c.bin, "pg_ctl"), "-D", c.dir, "stop", "-m", "immediate").CombinedOutput()
	if err != nil {
		_ = c.cmd.Process.Signal(syscall.SIGQUIT)
	}
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("postgres still running after pg_ctl stop -m immediate: %v %s", err, out)
	}
	c.cmd = nil
	return nil
}

// Restart starts the server again on the same port and data after
// StopImmediate. While the port is held by another, or was when the
// server tried to listen, it tries again, for up to restartPortWait:
// clients that kept dialing the stopped server's port may hold it for a
// while (a connection of the client's to itself, on that port).
func (c *Cluster) Restart(ctx context.Context) error {
	if c.cmd != nil {
		return errors.New("postgres is running")
	}
	deadline := time.Now().Add(restartPortWait)
	for {
		err := c.startServer(ctx)
		if err == nil || !errors.Is(err, errPortHeld) && !errors.Is(err, errExited) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// restartPortWait bounds how long Restart waits for its port.
const restartPortWait = 30 * time.Second

// CreateDatabase creates a database and returns its URL.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return "", fmt.Errorf("connecting to create %s: %w", name, err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("creating database %s: %w", name, err)
	}
	return c.DatabaseURL(name), nil
}

// Stop shuts the server down (fast mode) and removes its directory.
func (c *Cluster) Stop() error {
	if c.cmd != nil {
		_ = c.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.done:
		case <-time.After(20 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		c.cmd = nil
	}
	return c.cleanup()
}

func (c *Cluster) cleanup() error { return os.RemoveAll(c.dir) }

// kill stops the server at once and waits for it to exit.
func (c *Cluster) kill() {
	if c.cmd != nil {
		_ = c.cmd.Process.Kill()
		<-c.done
		c.cmd = nil
	}
}

func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

// binDir finds initdb on PATH or under /usr/lib/postgresql/*/bin (Debian
// does not put it on PATH), newest version first.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no initdb found on PATH or in /usr/lib/postgresql/*/bin: install PostgreSQL (apt-get install postgresql) or set DATABASE_URL")
}

func version(dir string) int {
	n, _ := strconv.Atoi(strings.Split(strings.TrimPrefix(dir, "/usr/lib/postgresql/"), "/")[0])
	return n
}

// portHeld is the error of listening on 127.0.0.1:port, nil if it is free.
func portHeld(port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
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
