//go:build unix

package mvcc

import (
	"errors"
	"os"
	"syscall"
)

// tryLock takes an exclusive (or shared) advisory lock on f without
// waiting: errWouldBlock when another open file holds a conflicting one.
func tryLock(f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return errWouldBlock
		case errors.Is(err, syscall.EINTR):
			continue
		}
		return err
	}
}

// isNoSpace reports whether err says the disk (or a quota) is full.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
