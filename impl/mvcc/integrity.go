package mvcc

import (
	"fmt"
	"strings"
)

// Damage is one thing found wrong in a data directory.
type Damage struct {
	File   string // the file's path
	Offset int64  // the byte offset in File where it is, -1 when not one place
	What   string
}

func (d Damage) String() string {
	if d.Offset >= 0 {
		return fmt.Sprintf("%s: %s (offset %d)", d.File, d.What, d.Offset)
	}
	return fmt.Sprintf("%s: %s", d.File, d.What)
}

// DamageError is what Open returns for a data directory it will not serve
// because it is damaged. errors.Is(err, ErrCorrupt) holds for it.
type DamageError struct {
	Dir     string
	Damage  []Damage // the first is the one that stopped the check
	Trusted string   // what can still be trusted
}

func (e *DamageError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mvcc: the data in %s is damaged: %s", e.Dir, e.Damage[0])
	if n := len(e.Damage) - 1; n > 0 {
		fmt.Fprintf(&b, " (and %d more)", n)
	}
	fmt.Fprintf(&b, ". What can still be trusted: %s. Nothing was changed; Check reports everything, Recover keeps what verifies (watchspec serve --check / --recover)", e.Trusted)
	return b.String()
}

// Is makes errors.Is(err, ErrCorrupt) hold.
func (e *DamageError) Is(target error) bool { return target == ErrCorrupt }
