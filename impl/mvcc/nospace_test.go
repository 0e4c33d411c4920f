package mvcc

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// faultFS is the operating system's file system with faults for the log: a
// byte budget (a write that runs past it writes what fits and fails with
// ENOSPC, as a full disk does), an error for the next Syncs, and counts of
// Syncs.
type faultFS struct {
	OSFS
	mu       sync.Mutex
	free     int64 // bytes the log may still grow by; < 0: no limit
	syncErr  error // returned by the next Sync, once
	sizes    map[string]int64
	syncs    int // Syncs of segment files
	dirSyncs int
}

func newFaultFS() *faultFS { return &faultFS{free: -1, sizes: map[string]int64{}} }

func (fs *faultFS) setFree(n int64) {
	fs.mu.Lock()
	fs.free = n
	fs.mu.Unlock()
}

func (fs *faultFS) counts() (syncs, dirSyncs int) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.syncs, fs.dirSyncs
}

func (fs *faultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := fs.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: f, fs: fs, name: name}, nil
}

func (fs *faultFS) SyncDir(dir string) error {
	fs.mu.Lock()
	fs.dirSyncs++
	fs.mu.Unlock()
	return fs.OSFS.SyncDir(dir)
}

type faultFile struct {
	File
	fs   *faultFS
	name string
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	fs := f.fs
	fs.mu.Lock()
	size := fs.sizes[f.name]
	grow := max(0, off+int64(len(p))-size)
	if fs.free >= 0 && grow > fs.free {
		fit := int(max(0, size+fs.free-off))
		fs.mu.Unlock()
		n, _ := f.File.WriteAt(p[:min(fit, len(p))], off)
		fs.mu.Lock()
		fs.sizes[f.name] = max(size, off+int64(n))
		fs.free -= max(0, off+int64(n)-size)
		fs.mu.Unlock()
		return n, &os.PathError{Op: "write", Path: f.name, Err: syscall.ENOSPC}
	}
	if fs.free >= 0 {
		fs.free -= grow
	}
	fs.sizes[f.name] = size + grow
	fs.mu.Unlock()
	return f.File.WriteAt(p, off)
}

func (f *faultFile) Truncate(size int64) error {
	fs := f.fs
	fs.mu.Lock()
	if old := fs.sizes[f.name]; size < old && fs.free >= 0 {
		fs.free += old - size
	}
	fs.sizes[f.name] = size
	fs.mu.Unlock()
	return f.File.Truncate(size)
}

func (f *faultFile) Sync() error {
	fs := f.fs
	fs.mu.Lock()
	fs.syncs++
	err := fs.syncErr
	fs.syncErr = nil
	fs.mu.Unlock()
	if err != nil {
		return err
	}
	return f.File.Sync()
}

// SPEC §2.1; issue 17: on a full disk a write fails with etcd's error and
// takes nothing with it, the NOSPACE alarm is raised and puts are refused
// while it is (etcd's applierV3Capped: deletes, compactions and reads go
// on); once space is freed and the alarm disarmed, writes resume without a
// restart, and a restart (clean or crash) finds exactly what was
// acknowledged.
func TestNoSpaceAlarm(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			dir := t.TempDir()
			fs := newFaultFS()
			opts := Options{FS: fs, CheckpointBytes: -1, CheckpointInterval: -1}
			s := openT(t, dir, opts)
			want := map[string]string{}
			for i := range 5 {
				k := fmt.Sprint("k", i)
				put(t, s, k, "v")
				want[k] = "v"
			}
			rev := s.Revision()
			fs.setFree(30) // less than a frame of a put
			_, err := s.Put(ctx, PutRequest{Key: "big", Value: strings.Repeat("x", 100)})
			if !errors.Is(err, ErrNoSpace) || err.Error() != "etcdserver: mvcc: database space exceeded" {
				t.Fatalf("put on a full disk: %v, want etcd's ErrNoSpace", err)
			}
			if a := s.Alarms(); len(a) != 1 || a[0] != AlarmNoSpace {
				t.Fatalf("alarms %v, want [NOSPACE]", a)
			}
			if s.Revision() != rev {
				t.Fatalf("revision %d after a failed write, want %d", s.Revision(), rev)
			}
			fs.setFree(-1) // space again, but the alarm holds puts back
			for _, req := range []func() error{
				func() error { _, err := s.Put(ctx, PutRequest{Key: "p", Value: "v"}); return err },
				func() error {
					_, err := s.Txn(ctx, TxnRequest{Failure: []Op{{Put: &PutRequest{Key: "p", Value: "v"}}}})
					return err
				},
			} {
				if err := req(); !errors.Is(err, ErrNoSpace) {
					t.Fatalf("a put while NOSPACE is raised: %v, want ErrNoSpace", err)
				}
			}
			// Deletes, read-only transactions, compactions and reads go on.
			if d := del(t, s, "k0", ""); d.Deleted != 1 {
				t.Fatalf("delete while NOSPACE is raised: %+v", d)
			}
			delete(want, "k0")
			if _, err := s.Txn(ctx, TxnRequest{Success: []Op{{Range: &RangeRequest{Key: "k1"}}}}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Compact(ctx, s.Revision()); err != nil {
				t.Fatal(err)
			}
			if !s.DisarmAlarm(AlarmNoSpace) || len(s.Alarms()) != 0 {
				t.Fatal("DisarmAlarm: the alarm was not raised, or still is")
			}
			put(t, s, "after", "v")
			want["after"] = "v"
			check := func(s *Store) {
				got := map[string]string{}
				for _, kv := range get(t, s, RangeRequest{Key: "\x00", RangeEnd: "\x00"}).KVs {
					got[kv.Key] = kv.Value
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("store holds %v, want %v", got, want)
				}
			}
			check(s)
			if crash {
				s.Kill()
			} else {
				s.Close()
			}
			check(openT(t, dir, Options{}))
		})
	}
}

// A full disk reported by fdatasync (delayed allocation) rather than write:
// the frame is taken back and the alarm raised; the store goes on. Any other
// fsync failure leaves the log in an unknown state: writes are refused until
// the store is reopened, which loses nothing acknowledged.
func TestLogSyncFailure(t *testing.T) {
	dir := t.TempDir()
	fs := newFaultFS()
	s := openT(t, dir, Options{FS: fs, CheckpointBytes: -1, CheckpointInterval: -1})
	put(t, s, "a", "1")
	fs.mu.Lock()
	fs.syncErr = &os.PathError{Op: "fdatasync", Path: "x", Err: syscall.ENOSPC}
	fs.mu.Unlock()
	if _, err := s.Put(ctx, PutRequest{Key: "b", Value: "2"}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("put whose fsync ran out of space: %v", err)
	}
	s.DisarmAlarm(AlarmNoSpace)
	put(t, s, "c", "3")
	// The checkpoint the disarm asked for, done: nothing else syncs now.
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	fs.syncErr = &os.PathError{Op: "fdatasync", Path: "x", Err: syscall.EIO}
	fs.mu.Unlock()
	if _, err := s.Put(ctx, PutRequest{Key: "d", Value: "4"}); err == nil || errors.Is(err, ErrNoSpace) {
		t.Fatalf("put whose fsync failed: %v, want a failure", err)
	}
	if _, err := s.Put(ctx, PutRequest{Key: "e", Value: "5"}); err == nil || !strings.Contains(err.Error(), "read-only until reopened") {
		t.Fatalf("put after a failed fsync: %v, want the store read-only", err)
	}
	s.Close()
	s = openT(t, dir, Options{})
	got := keys(get(t, s, RangeRequest{Key: "\x00", RangeEnd: "\x00"}).KVs)
	if fmt.Sprint(got) != "[a c]" {
		t.Fatalf("after reopening: %v, want [a c]", got)
	}
}

// Issue 13: one fdatasync per group commit. Through the file seam: every
// group commit syncs the log once, and nothing syncs the data file between
// checkpoints.
func TestOneSyncPerGroupCommit(t *testing.T) {
	fs := newFaultFS()
	s := openT(t, t.TempDir(), Options{FS: fs, CheckpointBytes: -1, CheckpointInterval: -1})
	syncs0, _ := fs.counts()
	st0 := s.Stats()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				if _, err := s.Put(ctx, PutRequest{Key: fmt.Sprint(w, "/", i), Value: "v"}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	syncs, _ := fs.counts()
	st := s.Stats()
	commits := st.GroupCommits - st0.GroupCommits
	t.Logf("800 puts from 16 writers: %d group commits, %d log fdatasyncs, %d data file commits", commits, syncs-syncs0, st.BackendCommits-st0.BackendCommits)
	if commits < 1 || commits > 800 {
		t.Fatalf("%d group commits for 800 puts", commits)
	}
	if n := int64(syncs - syncs0); n != commits || st.LogSyncs-st0.LogSyncs != commits {
		t.Fatalf("%d fdatasyncs of the log (%d counted by the store) for %d group commits, want one each", n, st.LogSyncs-st0.LogSyncs, commits)
	}
	if n := st.BackendCommits - st0.BackendCommits; n != 0 {
		t.Fatalf("%d commits of the data file on the write path, want none", n)
	}
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().BackendCommits - st.BackendCommits; n != 1 {
		t.Fatalf("a checkpoint made %d commits of the data file, want 1", n)
	}
}

// SPEC §2.1: the log reserves its segment ahead of its appends
// (fallocate), so that an fdatasync does not also commit the file's new
// size; the zeros after the last frame read back as the segment's clean
// end, and a write a crash cut in the middle of the reserved space is
// taken for the torn last write it is — the acknowledged writes before it
// all come back, nothing is reported as damage.
func TestReservedSegmentReadsBack(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{CheckpointBytes: -1, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		put(t, s, fmt.Sprint("k", i), "v")
	}
	seg := s.seg.path
	off := s.seg.off
	reserved := s.seg.alloc
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	if reserved == 0 {
		t.Skipf("the file system reserves nothing here (fallocate failed): %d bytes written, file %d", off, fi.Size())
	}
	if fi.Size() < segmentAllocStep || fi.Size() != reserved {
		t.Fatalf("segment of %d bytes (%d written, %d reserved), want %d reserved", fi.Size(), off, reserved, segmentAllocStep)
	}
	s = openT(t, dir, Options{CheckpointBytes: -1, CheckpointInterval: -1})
	if r := s.Revision(); r != 21 {
		t.Fatalf("reopened at revision %d, want 21", r)
	}
	for _, n := range s.Recovery().Notes {
		if strings.Contains(n, "discarded") {
			t.Fatalf("a clean end reported as a cut write: %v", s.Recovery().Notes)
		}
	}
	// A torn write in the reserved space of the new segment: its first
	// half written, zeros after it to the end of the file.
	put(t, s, "acked", "v") // revision 22, acknowledged
	seg, off = s.seg.path, s.seg.off
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	frame := appendFrame(nil, &frame{prev: 22, rev: 23, compact: -1, recs: []memRecord{{rev: revision{main: 23}, val: []byte("not a record")}}})
	f, err := os.OpenFile(seg, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(frame[:len(frame)/2], off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s = openT(t, dir, Options{})
	if r := s.Revision(); r != 22 {
		t.Fatalf("reopened at revision %d after a torn write, want 22", r)
	}
	if notes := fmt.Sprint(s.Recovery().Notes); !strings.Contains(notes, "discarded") {
		t.Fatalf("recovery notes %v, want one about the torn write", notes)
	}
}
