package secretfile

import (
	"os"
	"syscall"
)

// fileID is what a stat tells of a file's content: its size and
// modification time, and its device, inode and change time, which no
// one can set (a file replaced by rename, Kubernetes' ..data swap, is
// another inode or a later change time, whatever times it was given).
type fileID struct {
	size     int64
	mtime    int64 // UnixNano
	dev, ino uint64
	ctime    syscall.Timespec
}

func idOf(st os.FileInfo) fileID {
	id := fileID{size: st.Size(), mtime: st.ModTime().UnixNano()}
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino, id.ctime = uint64(s.Dev), s.Ino, s.Ctim
	}
	return id
}
