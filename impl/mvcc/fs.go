package mvcc

import (
	"os"
)

// FS is the file system the store's write-ahead log goes through: the log's
// segment files and the directory that holds them. The zero Options use the
// operating system's ([OSFS]). Tests inject faults through it — a disk that
// runs out of space, a failing fsync — and count fsyncs. The data file
// (mvcc.db) belongs to bbolt and does not go through it.
type FS interface {
	// OpenFile opens a log segment as os.OpenFile does.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Remove removes a log segment.
	Remove(name string) error
	// SyncDir makes the directory entries of dir durable (fsync of the
	// directory), after a segment was created or removed.
	SyncDir(dir string) error
}

// File is an open log segment: the store appends with WriteAt at the end of
// what it wrote, makes the appended bytes durable with Sync, and takes back a
// write that failed with Truncate.
type File interface {
	WriteAt(p []byte, off int64) (int, error)
	// Sync makes the written bytes durable: fdatasync(2) where the system
	// has it, fsync(2) elsewhere.
	Sync() error
	Truncate(size int64) error
	Close() error
}

// OSFS is the operating system's file system.
type OSFS struct{}

// OpenFile opens the file with os.OpenFile.
func (OSFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Remove removes the file with os.Remove.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// SyncDir opens dir and fsyncs it.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

type osFile struct{ *os.File }

func (f osFile) Sync() error { return fdatasync(f.File) }

// Allocate reserves disk space for [off, off+size) ahead of the writes
// (see allocator).
func (f osFile) Allocate(off, size int64) error { return allocate(f.File, off, size) }

// allocator is a File that can reserve the disk space of what will be
// written next, its size growing with zeros: fallocate(2). The log
// reserves its segments ahead of its appends, as etcd's WAL preallocates
// its files, so that an append's fdatasync writes the data and not also
// the file's new size — no journal commit of the size per group commit.
// A File without it (the test seams) is appended to as it grows.
type allocator interface {
	Allocate(off, size int64) error
}
