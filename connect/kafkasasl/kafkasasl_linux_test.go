//go:build linux

package kafkasasl

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

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

// adversary 51c: kafka.sasl.token_file's token function, which Build's
// oauth.Oauth callback calls with franz-go's context for each OAUTHBEARER
// handshake, returns within 2*secretfile.HungAfter on a hung mount (the
// bound secretfile.File's rewrite promises and awsrenewal.go relies on),
// or by its context. On the current code it ignores its context and
// File.Get stats the path before any bound: the token function, and the
// connection waiting for it, hang for as long as the mount does.
func TestATokenFileOnAHungMountAnswersTheSASLHandshakeWithinTwiceHungAfter(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("a-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := Config{Mechanism: OAuthBearer, TokenFile: path}.tokens()
	if err != nil {
		t.Fatal(err)
	}
	unhang := hungMount(t, dir)
	time.Sleep(secretfile.StatInterval) // the next use of the token looks at the file (the contract since 51c: a look answers for StatInterval)
	ctx, cancel := context.WithTimeout(context.Background(), 2*secretfile.HungAfter)
	defer cancel()
	type result struct {
		v   string
		err error
	}
	got := make(chan result, 1)
	began := time.Now()
	go func() {
		v, err := tokens(ctx)
		got <- result{v, err}
	}()
	select {
	case r := <-got:
		t.Logf("token: %q %v after %v", r.v, r.err, time.Since(began))
	case <-time.After(2*secretfile.HungAfter + time.Second):
		t.Errorf("the token function on a hung mount has not returned after %v, its context done %v ago", time.Since(began), time.Since(began)-2*secretfile.HungAfter)
		unhang()
		select {
		case r := <-got:
			t.Logf("once the mount was aborted: %q %v", r.v, r.err)
		case <-time.After(5 * time.Second):
			t.Fatal("the token function did not return even once the mount was aborted")
		}
	}
}
