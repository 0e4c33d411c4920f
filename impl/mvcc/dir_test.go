package mvcc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Issue 17: a directory that holds something other than a watchspec store
// is refused, with ErrNotStore and a message that says what it holds; a new
// or empty one starts a new store; nothing is created in a refused one.
func TestDataDirectoryKinds(t *testing.T) {
	foreignBolt := func(dir string) {
		db, err := bolt.Open(filepath.Join(dir, "mvcc.db"), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("someone-else")); return err })
		db.Close()
	}
	for _, tc := range []struct {
		name  string
		setup func(dir string)
		want  string // "" for a new store
	}{
		{"missing", func(dir string) { os.Remove(dir) }, ""},
		{"empty", func(dir string) {}, ""},
		{"lost+found only", func(dir string) { os.Mkdir(filepath.Join(dir, "lost+found"), 0o700) }, ""},
		{"a creation a crash cut", func(dir string) { os.WriteFile(filepath.Join(dir, creatingName), []byte("half"), 0o600) }, ""},
		{"etcd data directory", func(dir string) { os.MkdirAll(filepath.Join(dir, "member", "wal"), 0o700) }, "etcd data directory (member/)"},
		{"other files", func(dir string) { os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o600) }, "holds no store (notes.txt)"},
		{"0-byte data file", func(dir string) { os.WriteFile(filepath.Join(dir, "mvcc.db"), nil, 0o600) }, "the file is empty (0 bytes)"},
		{"foreign data file", func(dir string) {
			os.WriteFile(filepath.Join(dir, "mvcc.db"), []byte(strings.Repeat("not bbolt", 2000)), 0o600)
		}, "not a bbolt data file"},
		{"another program's bbolt file", foreignBolt, "a bbolt file but not a watchspec store"},
		{"data file is a directory", func(dir string) { os.Mkdir(filepath.Join(dir, "mvcc.db"), 0o700) }, "is not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			os.Mkdir(dir, 0o700)
			tc.setup(dir)
			before, _ := os.ReadDir(dir)
			s, err := Open(dir, Options{UnsafeNoFsync: true})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Open: %v, want a new store", err)
				}
				if s.Revision() != 1 {
					t.Fatalf("a new store at revision %d", s.Revision())
				}
				put(t, s, "a", "1")
				s.Close()
				return
			}
			if !errors.Is(err, ErrNotStore) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("Open: %v, want ErrNotStore saying %q and naming %s", err, tc.want, dir)
			}
			if after, _ := os.ReadDir(dir); len(after) != len(before) {
				t.Fatalf("the refused directory changed: %v, then %v", before, after)
			}
			if _, err := Check(dir); !errors.Is(err, ErrNotStore) {
				t.Fatalf("Check: %v, want ErrNotStore", err)
			}
		})
	}
}

// Issue 17: a data directory in use is reported at once as locked by
// another process (not after a 10 s timeout).
func TestLockedDirectory(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{UnsafeNoFsync: true})
	start := time.Now()
	for _, f := range []func() error{
		func() error { _, err := Open(dir, Options{}); return err },
		func() error { _, err := Check(dir); return err },
		func() error { _, err := Recover(dir); return err },
	} {
		if err := f(); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "locked by another process") {
			t.Fatalf("%v, want ErrLocked", err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Logf("the lock was reported after %v", d) // timing is not asserted; flock(LOCK_NB) does not wait
	}
	s.Close()
	if _, err := Check(dir); err != nil {
		t.Fatalf("Check after Close: %v", err)
	}
}

// A healthy store is not "recovered": Recover leaves it alone.
func TestRecoverLeavesAHealthyStoreAlone(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{UnsafeNoFsync: true})
	put(t, s, "a", "1")
	s.Close()
	if _, err := Recover(dir); err == nil || !strings.Contains(err.Error(), "not damaged") {
		t.Fatalf("Recover of a healthy store: %v", err)
	}
	s = openT(t, dir, Options{})
	if got := get(t, s, RangeRequest{Key: "a"}); len(got.KVs) != 1 {
		t.Fatalf("after Recover: %+v", got)
	}
}

// Issue 17, "Why": each damage it names is refused with a *DamageError
// that names mvcc.db — never a panic (bbolt SIGSEGVs or panics on these when
// it opens them unchecked), never an empty or older store served.
func TestIssue17Damage(t *testing.T) {
	src := t.TempDir()
	s := openT(t, src, Options{UnsafeNoFsync: true})
	value := strings.Repeat("0123456789abcdef", 64) // 1 KiB, findable on disk
	for i := range 400 {
		put(t, s, fmt.Sprintf("key/%04d", i), value)
	}
	s.Close()
	data := func(t *testing.T, dir string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, "mvcc.db"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if n := len(data(t, src)); n <= 256<<10 {
		t.Fatalf("the data file holds %d bytes; the test needs more than 256 KiB", n)
	}
	newestMeta := func(b []byte) int {
		m0, m1 := readMeta(bytes.NewReader(b), int64(len(b)), 0, 0), readMeta(bytes.NewReader(b), int64(len(b)), 4096, 1)
		if m1.txid > m0.txid {
			return 1
		}
		return 0
	}
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
	}{
		{"truncated to 12 KiB", func(b []byte) []byte { return b[:12<<10] }},
		{"truncated to 128 KiB", func(b []byte) []byte { return b[:128<<10] }},
		{"truncated to 256 KiB", func(b []byte) []byte { return b[:256<<10] }},
		{"0 bytes", func(b []byte) []byte { return nil }},
		{"the newest meta page corrupted (the older one would lose the last checkpoint)", func(b []byte) []byte {
			b[newestMeta(b)*4096+16+40] ^= 0x10 // its page count
			return b
		}},
		{"a data page flipped (a value)", func(b []byte) []byte {
			i := bytes.Index(b, []byte(value))
			b[i+100] ^= 0x01
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "d")
			if err := copyDir(src, dir); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "mvcc.db"), tc.damage(data(t, dir)), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Open(dir, Options{})
			var de *DamageError
			if !errors.As(err, &de) || !strings.Contains(err.Error(), filepath.Join(dir, "mvcc.db")) {
				t.Fatalf("Open: %v, want a *DamageError naming mvcc.db", err)
			}
			t.Logf("%v", err)
			if r, err := Check(dir); err != nil || r.OK() {
				t.Fatalf("Check: %v, %v; want the damage reported", r, err)
			}
		})
	}
}
