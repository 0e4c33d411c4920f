//go:build !linux

package mvcc

import (
	"errors"
	"os"
)

func fdatasync(f *os.File) error { return f.Sync() }

func allocate(f *os.File, off, size int64) error { return errors.ErrUnsupported }
