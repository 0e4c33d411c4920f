//go:build !unix

package mvcc

import (
	"errors"
	"os"
	"syscall"
)

// tryLock is a no-op where flock(2) does not exist: bbolt's own lock of the
// data file still keeps a second process out.
func tryLock(f *os.File, exclusive bool) error { return nil }

func isNoSpace(err error) bool { return errors.Is(err, syscall.ENOSPC) }
