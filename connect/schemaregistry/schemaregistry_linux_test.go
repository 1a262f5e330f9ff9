//go:build linux

package schemaregistry_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/dedupio/dedup/connect/schemaregistry"
	"github.com/dedupio/dedup/connect/secretfile"
)

// hungMount mounts a FUSE file system over dir that never answers: every
// stat, open or read under dir hangs, as on a hung NFS mount, until
// unhang (which aborts the connection: the calls fail with ENOTCONN) or
// the test's end. Skips where FUSE cannot be mounted.
func hungMount(t *testing.T, dir string) (unhang func()) {
	t.Helper()
	fd, err := syscall.Open("/dev/fuse", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	if err := syscall.Mount("adversary51c", dir, "fuse", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		if cerr := syscall.Close(fd); cerr != nil {
			t.Error(cerr)
		}
		t.Skipf("cannot mount FUSE: %v", err)
	}
	closed := false
	unhang = func() {
		if closed {
			return
		}
		closed = true
		if err := syscall.Close(fd); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() {
		unhang()
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Error(err)
		}
	})
	return unhang
}

// adversary 51c: a schema registry request with a bearer_token_file on a
// hung mount ends by its context and the client's timeout (or within
// 2*secretfile.HungAfter, File.Get's promise). On the current code the
// token is read in pkg/sr's PreReq hook, outside both, and File.Get
// stats the path before any bound: the request, and the record waiting
// for its schema, hang for as long as the mount does.
func TestARegistryRequestWithATokenFileOnAHungMountEndsByItsContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		_, _ = w.Write([]byte(`{"schema":"\"string\""}`))
	}))
	defer srv.Close()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("a-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cl, err := schemaregistry.NewClient(schemaregistry.Config{URL: srv.URL, BearerTokenFile: path, Timeout: 500 * time.Millisecond}, "kafka.schema_registry")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.SchemaByID(context.Background(), 1); err != nil { // works before the mount hangs
		t.Fatal(err)
	}
	unhang := hungMount(t, dir)
	time.Sleep(secretfile.StatInterval) // the next use of the token looks at the file (the contract since 51c: a look answers for StatInterval)
	ctx, cancel := context.WithTimeout(context.Background(), secretfile.HungAfter)
	defer cancel()
	got := make(chan error, 1)
	began := time.Now()
	go func() {
		_, err := cl.SchemaByID(ctx, 1)
		got <- err
	}()
	select {
	case err := <-got:
		t.Logf("request: %v after %v", err, time.Since(began))
	case <-time.After(2*secretfile.HungAfter + time.Second):
		t.Errorf("a registry request (context %v, client timeout 500ms) with its token file on a hung mount has not returned after %v", secretfile.HungAfter, time.Since(began))
		unhang()
		select {
		case err := <-got:
			t.Logf("once the mount was aborted: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatal("the request did not return even once the mount was aborted")
		}
	}
}
