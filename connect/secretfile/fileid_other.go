//go:build !linux

package secretfile

import (
	"os"
)

// fileID is what a stat tells of a file's content here: its size and
// modification time (a file rewritten keeping both is read again within
// RecheckInterval).
type fileID struct {
	size  int64
	mtime int64 // UnixNano
}

func idOf(st os.FileInfo) fileID { return fileID{size: st.Size(), mtime: st.ModTime().UnixNano()} }
