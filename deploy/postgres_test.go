package deploy

import (
	"context"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/sink/ledger"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// roleOf is the group role (sink/ledger/roles.sql) each kind of dedup
// process logs in with.
var roleOf = map[string]string{"run": "dedup_router", "worker": "dedup_worker", "ingress": "dedup_ingress", "migrate": "dedup_owner"}

// The compose file's PostgreSQL, for real: its init scripts (roles.sql,
// grants.sql, the users), run in the entrypoint's order on a throwaway
// server, give every dedup service's DATABASE_URL user its role, and no
// other; then the start-up compose orders works: the migrate service
// migrates, the routers' and the worker's migration checks pass, and the
// ingress's lookup reads the ledger.
func TestComposePostgresInit(t *testing.T) {
	if os.Getenv("DATABASE_URL") != "" {
		// The compose users have fixed names (router, worker, ...), and
		// roles are per cluster: this test creates them only in a server
		// of its own.
		t.Skip("DATABASE_URL is set: this test creates cluster-wide users with compose's names, in a throwaway server only")
	}
	var compose struct {
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
		} `yaml:"services"`
	}
	readYAML(t, "../docker-compose.yml", &compose)
	type script struct{ target, host string }
	var scripts []script
	for _, v := range compose.Services["postgres"].Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && path.Dir(parts[1]) == "/docker-entrypoint-initdb.d" {
			scripts = append(scripts, script{parts[1], parts[0]})
		}
	}
	slices.SortFunc(scripts, func(a, b script) int { return strings.Compare(path.Base(a.target), path.Base(b.target)) })
	if len(scripts) == 0 {
		t.Fatal("the postgres service mounts no init script into /docker-entrypoint-initdb.d")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgtest.Cluster(t).CreateDatabase(ctx, "dedup_compose")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	for _, s := range scripts {
		b, err := os.ReadFile(filepath.Join("..", s.host))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, string(b)); err != nil {
			t.Fatalf("init script %s (%s): %v", s.target, s.host, err)
		}
	}

	// Each service's URL, pointed at the throwaway server.
	urls := map[string]string{} // by process
	for name, s := range compose.Services {
		if len(s.Command) == 0 || roleOf[s.Command[0]] == "" {
			continue
		}
		u, err := url.Parse(s.Environment["DATABASE_URL"])
		if err != nil || u.User == nil {
			t.Fatalf("%s: DATABASE_URL %q: %v", name, s.Environment["DATABASE_URL"], err)
		}
		a, _ := url.Parse(admin)
		a.User = u.User
		local := a.String()
		c, err := pgx.Connect(ctx, local)
		if err != nil {
			t.Errorf("%s: its user %s cannot log in: %v", name, u.User.Username(), err)
			continue
		}
		for _, role := range roleOf {
			var member bool
			if err := c.QueryRow(ctx, `SELECT pg_has_role(session_user, $1, 'MEMBER')`, role).Scan(&member); err != nil {
				t.Fatal(err)
			}
			if want := role == roleOf[s.Command[0]]; member != want {
				t.Errorf("%s (%s): user %s is a member of %s: %v, want %v", name, s.Command[0], u.User.Username(), role, member, want)
			}
		}
		_ = c.Close(ctx)
		urls[s.Command[0]] = local
	}
	if len(urls) != len(roleOf) {
		t.Fatalf("dedup services by process: %v, want each of %v", slices.Sorted(maps.Keys(urls)), slices.Sorted(maps.Keys(roleOf)))
	}
	for _, p := range []string{"migrate", "run", "worker"} {
		if err := ledger.Migrate(ctx, urls[p]); err != nil {
			t.Fatalf("ledger.Migrate as compose's %s user: %v", p, err)
		}
	}
	cfg := ledger.DefaultConfig()
	cfg.URL = urls["ingress"]
	l, err := ledger.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Lookup(ctx, []string{"activity-a:e1"}); err != nil {
		t.Fatalf("the ingress's lookup as compose's ingress user: %v", err)
	}
}
