//go:build !linux

package mvcc

import "os"

func fdatasync(f *os.File) error { return f.Sync() }
