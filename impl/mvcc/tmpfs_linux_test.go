package mvcc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Issue 17: the same on a real full disk — an 8 MiB tmpfs, 5 MiB of it
// taken by a filler file, where the log, the checkpoints and bbolt's growth
// all run out of space. Removing the filler frees more than the store holds,
// so that the checkpoint retried after the alarm is disarmed has room. It
// needs the right to mount (root); elsewhere it is skipped, and
// TestNoSpaceAlarm covers the log through the file seam.
func TestNoSpaceOnTmpfs(t *testing.T) {
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root): %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 5<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mnt, "data")
	s := openT(t, dir, Options{CheckpointBytes: 64 << 10, CheckpointInterval: -1})
	val := strings.Repeat("v", 8<<10)
	acked := map[string]bool{}
	var full error
	for i := 0; i < 2000 && full == nil; i++ {
		k := fmt.Sprint("k", i)
		if _, err := s.Put(ctx, PutRequest{Key: k, Value: val}); err != nil {
			full = err
		} else {
			acked[k] = true
		}
	}
	if !errors.Is(full, ErrNoSpace) {
		t.Fatalf("filling the tmpfs: %v, want ErrNoSpace", full)
	}
	if a := s.Alarms(); len(a) != 1 || a[0] != AlarmNoSpace {
		t.Fatalf("alarms %v, want [NOSPACE]", a)
	}
	t.Logf("%d puts of 8 KiB acknowledged before the disk was full; %+v", len(acked), s.Stats())
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, PutRequest{Key: "refused", Value: "v"}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("put while NOSPACE is raised: %v", err)
	}
	s.DisarmAlarm(AlarmNoSpace)
	for i := range 10 {
		k := fmt.Sprint("after", i)
		if _, err := s.Put(ctx, PutRequest{Key: k, Value: "v"}); err != nil {
			t.Fatalf("put after space was freed and the alarm disarmed: %v", err)
		}
		acked[k] = true
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close (with its checkpoint): %v", err)
	}
	s = openT(t, dir, Options{})
	got := get(t, s, RangeRequest{Key: "\x00", RangeEnd: "\x00", KeysOnly: true})
	if len(got.KVs) != len(acked) {
		t.Fatalf("%d keys after reopening, %d acknowledged", len(got.KVs), len(acked))
	}
	for _, kv := range got.KVs {
		if !acked[kv.Key] {
			t.Fatalf("%s: never acknowledged", kv.Key)
		}
	}
}
