// Package secretfile reads secrets from files, as Kubernetes mounts them: a
// *_file config key names the file, and the value is its content without
// the trailing newline. Errors name the key and the path, never the
// content.
package secretfile

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// Read reads the secret in path once; key is the config key that named it
// (for errors).
func Read(key, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: reading the secret: %w", key, err)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("%s: %s is empty", key, path)
	}
	return v, nil
}

// File is a secret file that is read again when it changes, so that a
// rotated secret (a Kubernetes Secret update, a token refreshed by a
// sidecar, a revoked token) is used without a restart: at once when its
// size or modification time changed, and otherwise its content is read
// again at least every RecheckInterval (a file rewritten at the same size
// and modification time, which a stat cannot tell). Get is cheap when the
// file has not changed: one stat, and a read a second.
type File struct {
	key, path string
	now       func() time.Time

	mu     sync.Mutex
	size   int64
	mtime  time.Time
	readAt time.Time
	value  string
}

// RecheckInterval bounds how long a File keeps a value whose file was
// rewritten without a change of size or modification time.
const RecheckInterval = time.Second

// NewFile reads the secret once, so that a missing or empty file is a
// start-up error, and returns it for reading again.
func NewFile(key, path string) (*File, error) {
	f := &File{key: key, path: path, now: time.Now}
	if _, err := f.Get(); err != nil {
		return nil, err
	}
	return f, nil
}

// Get returns the secret, reading the file again if it changed. When the
// file cannot be read any more, it returns the error: a secret that was
// removed is not silently kept.
func (f *File) Get() (string, error) {
	st, err := os.Stat(f.path)
	if err != nil {
		return "", fmt.Errorf("%s: reading the secret: %w", f.key, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if f.value != "" && st.Size() == f.size && st.ModTime().Equal(f.mtime) && now.Sub(f.readAt) < RecheckInterval {
		return f.value, nil
	}
	v, err := Read(f.key, f.path)
	if err != nil {
		return "", err
	}
	f.value, f.size, f.mtime, f.readAt = v, st.Size(), st.ModTime(), now
	return v, nil
}
