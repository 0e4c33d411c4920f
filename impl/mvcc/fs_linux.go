package mvcc

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data and the metadata needed to read it back (its
// size), not its times: one journal commit fewer than fsync on most file
// systems, as etcd's WAL does (client/pkg/fileutil/sync_linux.go).
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

// allocate reserves [off, off+size) of f on disk, extending its size with
// zeros (fallocate(2), mode 0).
func allocate(f *os.File, off, size int64) error {
	for {
		err := syscall.Fallocate(int(f.Fd()), 0, off, size)
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}
