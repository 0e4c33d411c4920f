package mvcc

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sync"
	"testing"
)

var ctx = context.Background()

func openT(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newT(t testing.TB) *Store { return openT(t, t.TempDir(), Options{UnsafeNoFsync: true}) }

func put(t testing.TB, s *Store, k, v string) int64 {
	t.Helper()
	r, err := s.Put(ctx, PutRequest{Key: k, Value: v})
	if err != nil {
		t.Fatalf("Put(%q): %v", k, err)
	}
	return r.Revision
}

func del(t testing.TB, s *Store, k, end string) DeleteResponse {
	t.Helper()
	r, err := s.Delete(ctx, DeleteRequest{Key: k, RangeEnd: end, PrevKV: true})
	if err != nil {
		t.Fatalf("Delete(%q): %v", k, err)
	}
	return r
}

func get(t testing.TB, s *Store, r RangeRequest) RangeResponse {
	t.Helper()
	resp, err := s.Range(ctx, r)
	if err != nil {
		t.Fatalf("Range(%+v): %v", r, err)
	}
	return resp
}

func keys(kvs []KeyValue) []string {
	var out []string
	for _, kv := range kvs {
		out = append(out, kv.Key)
	}
	return out
}

// SPEC §2.1 Revisions: 1 on a fresh store, +1 per writing request, unchanged
// by reads, no-op deletes, failed requests and compactions.
func TestRevisions(t *testing.T) {
	s := newT(t)
	if got := s.Revision(); got != 1 {
		t.Fatalf("fresh store revision = %d, want 1", got)
	}
	if r := get(t, s, RangeRequest{Key: "a"}); r.Revision != 1 {
		t.Fatalf("range header on a fresh store = %d, want 1", r.Revision)
	}
	if rev := put(t, s, "a", "1"); rev != 2 {
		t.Fatalf("first put at %d, want 2", rev)
	}
	if r := del(t, s, "zz", ""); r.Deleted != 0 || r.Revision != 2 {
		t.Fatalf("delete of nothing = %+v, want 0 deleted at revision 2", r)
	}
	if _, err := s.Txn(ctx, TxnRequest{Success: []Op{{Put: &PutRequest{Key: "a"}}, {Put: &PutRequest{Key: "a"}}}}); err != ErrDuplicateKey {
		t.Fatalf("duplicate txn: %v", err)
	}
	if _, err := s.Compact(ctx, 2); err != nil {
		t.Fatal(err)
	}
	r, err := s.Txn(ctx, TxnRequest{Success: []Op{{Put: &PutRequest{Key: "b"}}, {Delete: &DeleteRequest{Key: "a"}}}})
	if err != nil || r.Revision != 3 {
		t.Fatalf("two-write txn = %+v, %v; want one revision, 3", r, err)
	}
	if got := s.Revision(); got != 3 {
		t.Fatalf("revision = %d, want 3", got)
	}
}

// SPEC §2.2 Key lifecycle: create/mod revision and version; a delete ends a
// life, a later put starts a new one at version 1.
func TestKeyLifecycle(t *testing.T) {
	s := newT(t)
	put(t, s, "k", "1")                                             // 2
	put(t, s, "k", "2")                                             // 3
	if d := del(t, s, "k", ""); d.Deleted != 1 || d.Revision != 4 { // 4
		t.Fatalf("delete = %+v", d)
	}
	put(t, s, "k", "3") // 5
	want := map[int64]*KeyValue{
		2: {Key: "k", Value: "1", CreateRevision: 2, ModRevision: 2, Version: 1},
		3: {Key: "k", Value: "2", CreateRevision: 2, ModRevision: 3, Version: 2},
		4: nil,
		5: {Key: "k", Value: "3", CreateRevision: 5, ModRevision: 5, Version: 1},
	}
	for rev, kv := range want {
		r := get(t, s, RangeRequest{Key: "k", Revision: rev})
		switch {
		case kv == nil && len(r.KVs) != 0:
			t.Errorf("at %d: %+v, want nothing", rev, r.KVs)
		case kv != nil && (len(r.KVs) != 1 || r.KVs[0] != *kv):
			t.Errorf("at %d: %+v, want %+v", rev, r.KVs, *kv)
		}
	}
	p, err := s.Put(ctx, PutRequest{Key: "k", Value: "4", PrevKV: true})
	if err != nil || p.PrevKV == nil || *p.PrevKV != *want[5] {
		t.Fatalf("put with PrevKV = %+v, %v", p, err)
	}
}

// SPEC §2.3 Range: etcd's range-end conventions, limit/more/count,
// countOnly, keysOnly, and the revision errors.
func TestRange(t *testing.T) {
	s := newT(t)
	for _, k := range []string{"a", "a/1", "a/2", "b", "\xff"} {
		put(t, s, k, "v"+k)
	}
	cases := []struct {
		req   RangeRequest
		keys  []string
		count int64
		more  bool
	}{
		{RangeRequest{Key: "a"}, []string{"a"}, 1, false},
		{RangeRequest{Key: "a/", RangeEnd: PrefixEnd("a/")}, []string{"a/1", "a/2"}, 2, false},
		{RangeRequest{Key: "a/1", RangeEnd: "\x00"}, []string{"a/1", "a/2", "b", "\xff"}, 4, false},
		{RangeRequest{Key: "\x00", RangeEnd: "\x00"}, []string{"a", "a/1", "a/2", "b", "\xff"}, 5, false},
		{RangeRequest{Key: "b", RangeEnd: "a"}, nil, 0, false},
		{RangeRequest{Key: "b", RangeEnd: "b"}, nil, 0, false},
		{RangeRequest{Key: "a", RangeEnd: "\x00", Limit: 2}, []string{"a", "a/1"}, 5, true},
		{RangeRequest{Key: "a", RangeEnd: "\x00", Limit: 5}, []string{"a", "a/1", "a/2", "b", "\xff"}, 5, false},
		{RangeRequest{Key: "a", RangeEnd: "\x00", Limit: -3}, []string{"a", "a/1", "a/2", "b", "\xff"}, 5, false},
		{RangeRequest{Key: "a", RangeEnd: "\x00", Limit: 1, CountOnly: true}, nil, 5, false},
		{RangeRequest{Key: "a", RangeEnd: "\x00", Revision: 3}, []string{"a", "a/1"}, 2, false},
		{RangeRequest{Key: "\xff", RangeEnd: PrefixEnd("\xff")}, []string{"\xff"}, 1, false},
	}
	for _, c := range cases {
		r := get(t, s, c.req)
		if !reflect.DeepEqual(keys(r.KVs), c.keys) || r.Count != c.count || r.More != c.more || r.Revision != 6 {
			t.Errorf("Range(%+v) = keys %q count %d more %v header %d; want %q %d %v 6",
				c.req, keys(r.KVs), r.Count, r.More, r.Revision, c.keys, c.count, c.more)
		}
	}
	r := get(t, s, RangeRequest{Key: "a", KeysOnly: true})
	if len(r.KVs) != 1 || r.KVs[0] != (KeyValue{Key: "a", CreateRevision: 2, ModRevision: 2, Version: 1}) {
		t.Errorf("keysOnly = %+v", r.KVs)
	}
	for _, c := range []struct {
		req RangeRequest
		err error
	}{
		{RangeRequest{Key: ""}, ErrEmptyKey},
		{RangeRequest{Key: "a", Revision: 7}, ErrFutureRev},
	} {
		if _, err := s.Range(ctx, c.req); err != c.err {
			t.Errorf("Range(%+v) error = %v, want %v", c.req, err, c.err)
		}
	}
	if r := get(t, s, RangeRequest{Key: "a", Revision: -5}); len(r.KVs) != 1 {
		t.Errorf("negative revision reads the current revision: %+v", r)
	}
}

// SPEC §2.4 Compaction: errors, Compact(0) once on a fresh store, reading at
// the compact revision works and below it fails.
func TestCompact(t *testing.T) {
	s := newT(t)
	if s.CompactRevision() != -1 {
		t.Fatalf("fresh compact revision = %d", s.CompactRevision())
	}
	if _, err := s.Compact(ctx, -1); err != ErrCompacted {
		t.Fatalf("Compact(-1) on a fresh store: %v, want ErrCompacted", err)
	}
	if _, err := s.Compact(ctx, 0); err != nil {
		t.Fatalf("Compact(0) on a fresh store: %v", err)
	}
	if _, err := s.Compact(ctx, 0); err != ErrCompacted {
		t.Fatalf("second Compact(0): %v, want ErrCompacted", err)
	}
	put(t, s, "a", "1") // 2
	put(t, s, "a", "2") // 3
	put(t, s, "b", "1") // 4
	if _, err := s.Compact(ctx, 5); err != ErrFutureRev {
		t.Fatalf("Compact(5) at revision 4: %v, want ErrFutureRev", err)
	}
	if r, err := s.Compact(ctx, 3); err != nil || r.Revision != 4 {
		t.Fatalf("Compact(3) = %+v, %v", r, err)
	}
	if _, err := s.Range(ctx, RangeRequest{Key: "a", Revision: 2}); err != ErrCompacted {
		t.Fatalf("read below the compact revision: %v", err)
	}
	r := get(t, s, RangeRequest{Key: "a", RangeEnd: "\x00", Revision: 3})
	if len(r.KVs) != 1 || r.KVs[0].Value != "2" {
		t.Fatalf("read at the compact revision = %+v", r.KVs)
	}
	if _, err := s.Compact(ctx, 4); err != nil {
		t.Fatalf("Compact(current): %v", err)
	}
	if _, err := s.Compact(ctx, 4); err != ErrCompacted {
		t.Fatalf("Compact at the compact revision: %v", err)
	}
}

// SPEC §2.5 Transactions: compares, branches, duplicate keys, ranges that
// see earlier writes, and the pre-check of ranges at explicit revisions.
func TestTxn(t *testing.T) {
	s := newT(t)
	put(t, s, "a", "x") // 2
	put(t, s, "a", "y") // 3
	cmp := func(c Compare) bool {
		t.Helper()
		r, err := s.Txn(ctx, TxnRequest{Compare: []Compare{c}})
		if err != nil {
			t.Fatalf("Txn(%+v): %v", c, err)
		}
		return r.Succeeded
	}
	for _, c := range []struct {
		c    Compare
		want bool
	}{
		{Compare{Key: "a", Target: TargetValue, Result: CompareEqual, Value: "y"}, true},
		{Compare{Key: "a", Target: TargetValue, Result: CompareLess, Value: "z"}, true},
		{Compare{Key: "a", Target: TargetValue, Result: CompareGreater, Value: "z"}, false},
		{Compare{Key: "a", Target: TargetVersion, Result: CompareEqual, Number: 2}, true},
		{Compare{Key: "a", Target: TargetCreateRevision, Result: CompareEqual, Number: 2}, true},
		{Compare{Key: "a", Target: TargetModRevision, Result: CompareGreater, Number: 2}, true},
		{Compare{Key: "a", Target: TargetModRevision, Result: CompareNotEqual, Number: 3}, false},
		{Compare{Key: "zz", Target: TargetValue, Result: CompareNotEqual, Value: "q"}, false},
		{Compare{Key: "zz", Target: TargetVersion, Result: CompareEqual, Number: 0}, true},
		{Compare{Key: "zz", Target: TargetCreateRevision, Result: CompareLess, Number: 1}, true},
	} {
		if got := cmp(c.c); got != c.want {
			t.Errorf("compare %+v = %v, want %v", c.c, got, c.want)
		}
	}
	for _, c := range []struct {
		name string
		txn  TxnRequest
		err  error
	}{
		{"put twice", TxnRequest{Success: []Op{{Put: &PutRequest{Key: "b"}}, {Put: &PutRequest{Key: "b"}}}}, ErrDuplicateKey},
		{"put in a deleted range", TxnRequest{Success: []Op{{Put: &PutRequest{Key: "b/1"}}, {Delete: &DeleteRequest{Key: "b/", RangeEnd: PrefixEnd("b/")}}}}, ErrDuplicateKey},
		{"put after a from-key delete (etcd#22445)", TxnRequest{Success: []Op{{Delete: &DeleteRequest{Key: "a", RangeEnd: "\x00"}}, {Put: &PutRequest{Key: "c"}}}}, ErrDuplicateKey},
		{"failure branch checked too", TxnRequest{Failure: []Op{{Put: &PutRequest{Key: "b"}}, {Put: &PutRequest{Key: "b"}}}}, ErrDuplicateKey},
		{"empty op", TxnRequest{Success: []Op{{}}}, ErrKeyNotFound},
		{"two operations in one op", TxnRequest{Success: []Op{{Put: &PutRequest{Key: "b"}, Delete: &DeleteRequest{Key: "b"}}}}, ErrInvalidRequest},
		{"empty compare key", TxnRequest{Compare: []Compare{{}}}, ErrEmptyKey},
		{"future range", TxnRequest{Success: []Op{{Put: &PutRequest{Key: "b"}}, {Range: &RangeRequest{Key: "a", Revision: 9}}}}, ErrFutureRev},
		{"overlapping deletes are fine", TxnRequest{Success: []Op{{Delete: &DeleteRequest{Key: "a"}}, {Delete: &DeleteRequest{Key: "a", RangeEnd: "\x00"}}}}, nil},
	} {
		before := s.Revision()
		_, err := s.Txn(ctx, c.txn)
		if err != c.err {
			t.Errorf("%s: error %v, want %v", c.name, err, c.err)
		}
		if err != nil && s.Revision() != before {
			t.Errorf("%s: a failed txn moved the revision", c.name)
		}
	}
	// After the overlapping deletes: a deleted at 4.
	r, err := s.Txn(ctx, TxnRequest{
		Compare: []Compare{{Key: "a", Target: TargetVersion, Result: CompareEqual, Number: 0}},
		Success: []Op{
			{Range: &RangeRequest{Key: "n"}},
			{Put: &PutRequest{Key: "n", Value: "1"}},
			{Range: &RangeRequest{Key: "n"}},
			{Range: &RangeRequest{Key: "a", Revision: 3}},
			{Delete: &DeleteRequest{Key: "zz"}},
		},
	})
	if err != nil || !r.Succeeded || r.Revision != 5 {
		t.Fatalf("txn = %+v, %v", r, err)
	}
	rs := r.Responses
	if rs[0].Range.Count != 0 || rs[0].Range.Revision != 4 || rs[1].Put.Revision != 5 ||
		rs[2].Range.Count != 1 || rs[2].Range.KVs[0].ModRevision != 5 || rs[2].Range.Revision != 5 ||
		rs[3].Range.KVs[0].Value != "y" || rs[4].Delete.Deleted != 0 || rs[4].Delete.Revision != 5 {
		t.Fatalf("nested responses: %+v %+v %+v %+v %+v", rs[0].Range, rs[1].Put, rs[2].Range, rs[3].Range, rs[4].Delete)
	}
	if _, err := s.Compact(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Txn(ctx, TxnRequest{Success: []Op{{Put: &PutRequest{Key: "q"}}, {Range: &RangeRequest{Key: "a", Revision: 3}}}}); err != ErrCompacted {
		t.Fatalf("compacted range in txn: %v", err)
	}
	if s.Revision() != 5 {
		t.Fatalf("a failed txn wrote")
	}
}

// SPEC §2.1, §2.4: a restart recovers the revision, the compact revision and
// every version at or above it.
func TestReopenRecoversEverything(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		put(t, s, fmt.Sprintf("k%d", i%5), fmt.Sprint(i))
	}
	del(t, s, "k3", "")
	if _, err := s.Compact(ctx, 10); err != nil {
		t.Fatal(err)
	}
	want := map[int64]RangeResponse{}
	for rev := int64(10); rev <= s.Revision(); rev++ {
		want[rev] = get(t, s, RangeRequest{Key: "\x00", RangeEnd: "\x00", Revision: rev})
	}
	rev, c := s.Revision(), s.CompactRevision()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, Options{})
	if s.Revision() != rev || s.CompactRevision() != c {
		t.Fatalf("after reopen revision %d compact %d, want %d %d", s.Revision(), s.CompactRevision(), rev, c)
	}
	for r, w := range want {
		if got := get(t, s, RangeRequest{Key: "\x00", RangeEnd: "\x00", Revision: r}); !reflect.DeepEqual(got, w) {
			t.Errorf("at %d after reopen: %+v, want %+v", r, got, w)
		}
	}
}

// SPEC §3.5 Resumable via §2.4; regression for etcd#18089 and etcd#17780:
// compacting at the revision of a delete keeps the tombstone, so the DELETE
// is still in the history at the compact revision, and the revision does not
// go back after a restart although the last write was that tombstone.
func TestCompactionKeepsTombstoneAtCompactRevision(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "a", "1") // 2
	put(t, s, "b", "1") // 3
	del(t, s, "a", "")  // 4
	if _, err := s.Compact(ctx, 4); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		evs, last, err := s.Events(4, 4, 0, true)
		if err != nil || last != 4 || len(evs) != 1 || evs[0].Type != Delete || evs[0].KV != (KeyValue{Key: "a", ModRevision: 4}) {
			t.Fatalf("Events(4, 4) = %+v, %d, %v; want the DELETE of a at 4", evs, last, err)
		}
		if evs[0].PrevKV != nil {
			t.Fatalf("PrevKV of an event at the compact revision is below it and must be omitted: %+v", evs[0].PrevKV)
		}
		if s.Revision() != 4 || s.CompactRevision() != 4 {
			t.Fatalf("revision %d compact %d, want 4 4", s.Revision(), s.CompactRevision())
		}
		if r := get(t, s, RangeRequest{Key: "\x00", RangeEnd: "\x00"}); !reflect.DeepEqual(keys(r.KVs), []string{"b"}) {
			t.Fatalf("live keys %q, want [b]", keys(r.KVs))
		}
	}
	check(s)
	s.Close()
	// etcd#19179: after a restart the key index still knows the tombstone.
	s = openT(t, dir, Options{UnsafeNoFsync: true})
	check(s)
	if _, err := s.Compact(ctx, 4); err != ErrCompacted {
		t.Fatalf("compact rev not recovered: %v", err)
	}
	// A later compaction drops the old tombstone.
	put(t, s, "c", "1") // 5
	if _, err := s.Compact(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if r := get(t, s, RangeRequest{Key: "\x00", RangeEnd: "\x00", Revision: 5}); !reflect.DeepEqual(keys(r.KVs), []string{"b", "c"}) {
		t.Fatalf("live keys at 5: %q", keys(r.KVs))
	}
}

// §2.4 with crash safety (etcd#17780, etcd#19179): a crash after any batch of
// a multi-batch compaction reopens with the same revision, compact revision,
// reads at every revision from the compact revision on, and the same
// history of events; and finishes the compaction.
func TestCompactionCrashAfterEveryBatch(t *testing.T) {
	dir := t.TempDir()
	snaps := t.TempDir()
	var mu sync.Mutex
	var snapshots []string
	finished := make(chan struct{}, 1)
	hook := func(rev int64, batch int, done bool) {
		// Runs between compaction batches with no writer active: the data
		// file is exactly what a crash at this moment leaves.
		p := filepath.Join(snaps, fmt.Sprintf("batch-%03d", batch))
		if err := copyDir(dir, p); err != nil {
			t.Error(err)
		}
		mu.Lock()
		snapshots = append(snapshots, p)
		mu.Unlock()
		if done {
			finished <- struct{}{}
		}
	}
	s, err := Open(dir, Options{UnsafeNoFsync: true, CompactionBatchLimit: 3, compactionHook: hook, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		k := fmt.Sprintf("k%d", i%7)
		if i%5 == 4 {
			del(t, s, k, "")
		} else {
			put(t, s, k, fmt.Sprint(i))
		}
	}
	del(t, s, "k0", "\x00") // the compaction revision is a multi-key delete
	c := s.Revision()
	put(t, s, "k1", "after")
	type state struct {
		rev, compact int64
		reads        map[int64]RangeResponse
		events       []Event
	}
	snapshot := func(s *Store) state {
		st := state{rev: s.Revision(), compact: s.CompactRevision(), reads: map[int64]RangeResponse{}}
		for r := c; r <= st.rev; r++ {
			st.reads[r] = get(t, s, RangeRequest{Key: "\x00", RangeEnd: "\x00", Revision: r})
		}
		var err error
		st.events, _, err = s.Events(c, st.rev, 0, true)
		if err != nil {
			t.Fatalf("Events: %v", err)
		}
		return st
	}
	// Precopy: the state as it must be once compacted.
	if _, err := s.Compact(ctx, c); err != nil {
		t.Fatal(err)
	}
	want := snapshot(s)
	if want.events[0].Type != Delete || want.events[0].KV.ModRevision != c {
		t.Fatalf("the history at the compact revision should open with its DELETEs: %+v", want.events[0])
	}
	<-finished
	s.Close()
	if len(snapshots) < 3 {
		t.Fatalf("compaction ran in %d batches; the test needs several", len(snapshots))
	}
	for _, p := range snapshots {
		s2, err := Open(p, Options{UnsafeNoFsync: true})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if got := snapshot(s2); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: reopened state differs:\n got %+v\nwant %+v", filepath.Base(p), got, want)
		}
		s2.Close()
	}
}

// copyDir copies the files of a data directory (the data file and the log).
func copyDir(from, to string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			if err := copyFile(filepath.Join(from, e.Name()), filepath.Join(to, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

func copyFile(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Group commit: writers that arrive while a commit is being written share
// the next transaction, and every write still gets its own revision;
// OnCommits is called once per group commit with its revisions in order. A
// writer that finds no commit in progress commits in its own goroutine.
func TestGroupCommitSharesTransactions(t *testing.T) {
	const writers = 15
	release := make(chan struct{})
	var groups [][]int64 // the revisions OnCommits was given, per call
	s := openT(t, t.TempDir(), Options{OnCommits: func(cs []Commit) {
		var revs []int64
		for _, c := range cs {
			revs = append(revs, c.Revision)
		}
		groups = append(groups, revs)
		// Runs on the commit goroutine: hold the first commit until every
		// other writer is queued, so that they must share one transaction.
		if len(groups) == 1 {
			<-release
		}
	}})
	done := make(chan int64, writers+1)
	write := func(k string) {
		r, err := s.Put(ctx, PutRequest{Key: k, Value: "x"})
		if err != nil {
			t.Error(err)
		}
		done <- r.Revision
	}
	go write("first")
	for s.Revision() < 2 { // published before OnCommit runs
		runtime.Gosched()
	}
	for i := range writers {
		go write(fmt.Sprint("w", i))
	}
	for {
		s.mu.Lock()
		q := len(s.queue)
		s.mu.Unlock()
		if q == writers {
			break
		}
		runtime.Gosched()
	}
	close(release)
	seen := map[int64]bool{}
	for range writers + 1 {
		rev := <-done
		if seen[rev] {
			t.Fatalf("revision %d acknowledged twice", rev)
		}
		seen[rev] = true
	}
	for r := int64(2); r <= writers+2; r++ {
		if !seen[r] {
			t.Fatalf("revision %d missing: revisions must be consecutive", r)
		}
	}
	if n := s.stats.groupCommits.Load(); n != 2 {
		t.Fatalf("%d writes took %d transactions, want 2", writers+1, n)
	}
	if len(groups) != 2 || fmt.Sprint(groups[0]) != "[2]" || len(groups[1]) != writers ||
		groups[1][0] != 3 || groups[1][writers-1] != writers+2 {
		t.Fatalf("OnCommits got %v, want [2] then the %d revisions 3..%d in one call", groups, writers, writers+2)
	}
	// The first writer found no commit in progress and committed in its own
	// goroutine; the others, queued meanwhile, were left to the commit
	// goroutine.
	if n := s.stats.ownCommits.Load(); n != 1 {
		t.Fatalf("%d writes committed by their writers, want 1 (the first)", n)
	}
	// With no commit in progress, a lone writer commits its own write.
	for { // the commit goroutine answers its writers before it is done
		s.mu.Lock()
		busy := s.committing
		s.mu.Unlock()
		if !busy {
			break
		}
		runtime.Gosched()
	}
	put(t, s, "alone", "x")
	if n := s.stats.ownCommits.Load(); n != 2 {
		t.Fatalf("a lone write was not committed by its writer (%d)", n)
	}
}
