package integration

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dedupio/dedup/schemas"
)

// Many replicas starting at once on an empty database: 4 routers and 2
// workers, 10 times, each time on a new database. Every one of them runs
// the migrations at start; none may fail (they take turns behind an
// advisory lock), every router becomes ready, every worker stays up, and
// the schema ends at the newest version.
func TestManyReplicasStartAtOnceOnAnEmptyDatabase(t *testing.T) {
	if stack.Postgres == nil {
		t.Skip("DATABASE_URL given: the test needs fresh databases")
	}
	e := newEnv(t, 4)
	files, err := fs.Glob(schemas.Migrations, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var newest int64 // the highest number (00010_*.sql: 10; numbers may have gaps)
	for _, f := range files {
		var n int64
		if _, err := fmt.Sscanf(path.Base(f), "%d_", &n); err == nil && n > newest {
			newest = n
		}
	}
	for round := 0; round < 10; round++ {
		url, err := stack.Postgres.CreateDatabase(context.Background(), fmt.Sprintf("dedup_startup_%d", round))
		if err != nil {
			t.Fatal(err)
		}
		cfg := e.config()
		cfg.Postgres.URL = url
		var routers []*proc
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := e.spawn(fmt.Sprintf("r%d-%d", round, i), cfg)
				mu.Lock()
				routers = append(routers, p)
				mu.Unlock()
			}()
		}
		path := e.writeConfig(cfg)
		type worker struct {
			cmd    *exec.Cmd
			err    error         // of Wait, once exited is closed
			exited chan struct{} // closed when the process has exited
		}
		var workers []*worker
		for i := 0; i < 2; i++ {
			cmd := exec.Command(dedupBin, "worker", "--config", path)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w := &worker{cmd: cmd, exited: make(chan struct{})}
			go func() { w.err = cmd.Wait(); close(w.exited) }()
			// A round that fails before it stops its workers leaves none
			// running.
			t.Cleanup(func() {
				select {
				case <-w.exited:
				default:
					_ = cmd.Process.Kill()
					<-w.exited
				}
			})
			workers = append(workers, w)
		}
		wg.Wait()
		for _, p := range routers {
			if !eventually(time.Minute, func() bool { return p.ready() == 200 || !p.running() }) || !p.running() {
				t.Fatalf("round %d: router %s not ready (running=%v, exit %v)", round, p.name, p.running(), p.err)
			}
		}
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		var version int64
		err = conn.QueryRow(context.Background(), `SELECT max(version_id) FROM goose_db_version`).Scan(&version)
		_ = conn.Close(context.Background())
		if err != nil || version != newest {
			t.Fatalf("round %d: schema version %d (%v), want %d", round, version, err, newest)
		}
		for _, p := range routers {
			p.stop(t)
		}
		for i, w := range workers {
			select {
			case <-w.exited:
				t.Fatalf("round %d: worker %d exited before it was stopped: %v", round, i, w.err)
			default:
			}
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
			<-w.exited
			if w.err != nil {
				t.Fatalf("round %d: worker %d: %v", round, i, w.err)
			}
		}
	}
}
