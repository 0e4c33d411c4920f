package mvcc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func grant(t *testing.T, s *Store, id, ttl int64) Lease {
	t.Helper()
	l, err := s.LeaseGrant(context.Background(), Lease{ID: id, TTL: ttl})
	if err != nil {
		t.Fatalf("LeaseGrant(%d, %d): %v", id, ttl, err)
	}
	return l
}

func putLease(t *testing.T, s *Store, k, v string, lease int64) int64 {
	t.Helper()
	resp, err := s.Put(context.Background(), PutRequest{Key: k, Value: v, Lease: lease})
	if err != nil {
		t.Fatalf("Put(%q, lease %d): %v", k, lease, err)
	}
	return resp.Revision
}

// SPEC §3.15 LeaseAtomic, §3.14 LeaseDeletes: a revoke deletes every key
// attached to the lease at one revision, in key order, and nothing else;
// the key-values carry their lease.
func TestLeaseRevokeDeletesAttachedKeysAtOneRevision(t *testing.T) {
	s := newT(t)
	ctx := context.Background()
	l := grant(t, s, 7, 60)
	if l.ID != 7 || l.TTL != 60 {
		t.Fatalf("granted %+v, want ID 7 TTL 60", l)
	}
	for _, k := range []string{"c", "a", "b"} {
		putLease(t, s, k, "v", 7)
	}
	put(t, s, "d", "unleased")
	if kv := get(t, s, RangeRequest{Key: "a"}).KVs[0]; kv.Lease != 7 {
		t.Fatalf("a's lease is %d, want 7", kv.Lease)
	}
	if _, keys, ok := s.LeaseLookup(7); !ok || !reflect.DeepEqual(keys, []string{"a", "b", "c"}) {
		t.Fatalf("LeaseLookup(7) = %v %v, want a b c", keys, ok)
	}
	before := s.Revision()
	rev, err := s.LeaseRevoke(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	if rev != before+1 {
		t.Fatalf("revoke at revision %d, want one revision: %d", rev, before+1)
	}
	evs, _, err := s.Events(rev, rev, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		if ev.Type != Delete || ev.KV.ModRevision != rev || ev.PrevKV == nil || ev.PrevKV.Lease != 7 {
			t.Errorf("event %+v: want a DELETE at %d with the leased PrevKV", ev, rev)
		}
		got = append(got, ev.KV.Key)
	}
	if !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Fatalf("revoke deleted %v, want a b c at one revision", got)
	}
	if ks := keys(get(t, s, RangeRequest{Key: "a", RangeEnd: "\x00"}).KVs); !reflect.DeepEqual(ks, []string{"d"}) {
		t.Fatalf("after the revoke the keys are %v, want d", ks)
	}
	if _, _, ok := s.LeaseLookup(7); ok {
		t.Fatal("lease 7 is still in the table after its revoke")
	}
	if _, err := s.LeaseRevoke(ctx, 7); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("second revoke: %v, want ErrLeaseNotFound", err)
	}
	// A revoke of a lease with no keys does not move the revision.
	grant(t, s, 8, 60)
	if rev2, err := s.LeaseRevoke(ctx, 8); err != nil || rev2 != rev {
		t.Fatalf("revoke of an empty lease: %d %v, want %d", rev2, err, rev)
	}
}

// SPEC §2.10 LeaseAttach: a put or a transaction with a lease that does not exist
// fails with etcd's error and writes nothing.
func TestPutWithUnknownLeaseFails(t *testing.T) {
	s := newT(t)
	ctx := context.Background()
	before := s.Revision()
	if _, err := s.Put(ctx, PutRequest{Key: "a", Value: "1", Lease: 42}); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("Put with lease 42: %v, want ErrLeaseNotFound", err)
	}
	_, err := s.Txn(ctx, TxnRequest{Success: []Op{{Put: &PutRequest{Key: "b", Value: "1"}}, {Put: &PutRequest{Key: "c", Value: "1", Lease: 42}}}})
	if !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("Txn with lease 42: %v, want ErrLeaseNotFound", err)
	}
	if s.Revision() != before || get(t, s, RangeRequest{Key: "a", RangeEnd: "\x00"}).Count != 0 {
		t.Fatal("a failed put with an unknown lease wrote something")
	}
	if ErrLeaseNotFound.Error() != "etcdserver: requested lease not found" {
		t.Fatalf("text %q is not etcd's", ErrLeaseNotFound)
	}
}

// SPEC §2.10 LeaseAttach: a transaction's ops are checked in order, the first
// failing one deciding the error, as etcd's checkTxn (etcdserver/txn/txn.go
// at v3.7.3): a put with an unknown lease before a range at a future or
// compacted revision fails with ErrLeaseNotFound, and after it with the
// range's error. Regression: the store checked every range first (found by
// proptest's TestStoreMatchesModel).
func TestTxnChecksOpsInOrder(t *testing.T) {
	s := newT(t)
	ctx := context.Background()
	putLease(t, s, "a", "1", 0)
	put := Op{Put: &PutRequest{Key: "b", Value: "1", Lease: 42}}
	future := Op{Range: &RangeRequest{Key: "a", Revision: s.Revision() + 1}}
	if _, err := s.Txn(ctx, TxnRequest{Success: []Op{put, future}}); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("put with lease 42, then a range in the future: %v, want ErrLeaseNotFound", err)
	}
	if _, err := s.Txn(ctx, TxnRequest{Success: []Op{future, put}}); !errors.Is(err, ErrFutureRev) {
		t.Fatalf("a range in the future, then a put with lease 42: %v, want ErrFutureRev", err)
	}
}

// SPEC §2.9 Lease operations: a put over a leased key moves it to the new lease (or
// to none), and a delete detaches it; a revoke then leaves it alone.
func TestLeaseAttachDetach(t *testing.T) {
	s := newT(t)
	ctx := context.Background()
	grant(t, s, 1, 60)
	grant(t, s, 2, 60)
	putLease(t, s, "k", "1", 1)
	putLease(t, s, "k", "2", 2)
	putLease(t, s, "j", "1", 1)
	put(t, s, "j", "unleased")
	putLease(t, s, "m", "1", 1)
	del(t, s, "m", "")
	if _, keys, _ := s.LeaseLookup(1); len(keys) != 0 {
		t.Fatalf("lease 1 still has %v", keys)
	}
	if _, keys, _ := s.LeaseLookup(2); !reflect.DeepEqual(keys, []string{"k"}) {
		t.Fatalf("lease 2 has %v, want k", keys)
	}
	before := s.Revision()
	if rev, err := s.LeaseRevoke(ctx, 1); err != nil || rev != before {
		t.Fatalf("revoke of lease 1: %d %v: it must delete nothing", rev, err)
	}
	if got := get(t, s, RangeRequest{Key: "a", RangeEnd: "\x00"}).Count; got != 2 {
		t.Fatalf("%d keys left, want j and k", got)
	}
}

// SPEC §2.9 Lease operations: grants are checked as etcd's lessor does; ID 0 lets the
// store choose a positive ID.
func TestLeaseGrantErrors(t *testing.T) {
	s := newT(t)
	ctx := context.Background()
	grant(t, s, 5, 10)
	if _, err := s.LeaseGrant(ctx, Lease{ID: 5, TTL: 10}); !errors.Is(err, ErrLeaseExist) {
		t.Fatalf("grant of a taken ID: %v", err)
	}
	if _, err := s.LeaseGrant(ctx, Lease{ID: 6, TTL: MaxLeaseTTL + 1}); !errors.Is(err, ErrLeaseTTLTooLarge) {
		t.Fatalf("grant above MaxLeaseTTL: %v", err)
	}
	if l := grant(t, s, 0, 10); l.ID <= 0 || l.ID == 5 {
		t.Fatalf("chosen ID %d", l.ID)
	}
	if n := len(s.Leases()); n != 2 {
		t.Fatalf("%d leases, want 2", n)
	}
}

// SPEC §2.9 Lease operations: leases, and keys' leases, survive a crash; a revoke cut
// by a crash between the lease table and the log is finished on Open.
func TestLeasesSurviveCrash(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	grant(t, s, 3, 30)
	grant(t, s, 4, 40)
	putLease(t, s, "a", "1", 3)
	putLease(t, s, "b", "1", 4)
	s.Kill()

	s = openT(t, dir, Options{})
	if got := s.Leases(); !reflect.DeepEqual(got, []Lease{{3, 30}, {4, 40}}) {
		t.Fatalf("leases after the crash: %v", got)
	}
	if kv := get(t, s, RangeRequest{Key: "a"}).KVs[0]; kv.Lease != 3 {
		t.Fatalf("a's lease after the crash: %d", kv.Lease)
	}
	if _, keys, _ := s.LeaseLookup(4); !reflect.DeepEqual(keys, []string{"b"}) {
		t.Fatalf("lease 4's keys after the crash: %v", keys)
	}
	rev := s.Revision()
	s.Kill()
	// The revoke of 4 wrote the table, and the crash came before the log.
	if err := os.WriteFile(filepath.Join(dir, leaseFileName), encodeLeases(map[int64]int64{3: 30}), 0o600); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, Options{})
	if s.Revision() != rev+1 || get(t, s, RangeRequest{Key: "b"}).Count != 0 || get(t, s, RangeRequest{Key: "a"}).Count != 1 {
		t.Fatalf("the cut revoke was not finished at one revision: revision %d (was %d)", s.Revision(), rev)
	}
	if n := s.Recovery().Notes; len(n) == 0 {
		t.Fatal("no recovery note for the finished revoke")
	}
	s.Close()
	// A damaged table is refused, not taken for an empty one.
	b, _ := os.ReadFile(filepath.Join(dir, leaseFileName))
	b[len(b)-6] ^= 1
	os.WriteFile(filepath.Join(dir, leaseFileName), b, 0o600)
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with a damaged lease table: %v, want ErrCorrupt", err)
	}
	rep, err := Check(dir)
	if err != nil || rep.OK() || !strings.Contains(rep.String(), "lease table") {
		t.Fatalf("Check with a damaged lease table: %v %v", rep, err)
	}
	// Recover moves it aside: the leases are lost, and so are their keys.
	rr, err := Recover(dir)
	if err != nil || !strings.Contains(strings.Join(rr.Lost, "\n"), "lease table") {
		t.Fatalf("Recover: %v %v", rr, err)
	}
	s = openT(t, dir, Options{})
	defer s.Close()
	if len(s.Leases()) != 0 || get(t, s, RangeRequest{Key: "a"}).Count != 0 {
		t.Fatalf("after Recover: leases %v, a present %d", s.Leases(), get(t, s, RangeRequest{Key: "a"}).Count)
	}
}

// The record encoding keeps the lease, and refuses a lease on a tombstone.
func TestRecordLease(t *testing.T) {
	r := record{kv: KeyValue{Key: "k", Value: "v", CreateRevision: 2, ModRevision: 3, Version: 2, Lease: -5}, hasPrev: true, prev: revision{main: 2}}
	got, err := openRecord(revision{main: 3}, r.seal(revKey(revision{main: 3})), false)
	if err != nil || got.kv != r.kv {
		t.Fatalf("round trip: %+v %v, want %+v", got.kv, err, r.kv)
	}
	if _, err := decodeRecord(revision{main: 3}, []byte{flagTomb | flagLease, 1, 'k', 2}, false); err == nil {
		t.Fatal("a tombstone with a lease decoded")
	}
}

// SPEC §2.3 Range: a keys-only range, alone or in a transaction, answers
// Lease 0 for a leased key, as etcd v3.7.3's index-only read does; a full
// range answers the lease.
func TestKeysOnlyRangeHasNoLease(t *testing.T) {
	s := newT(t)
	ctx := context.Background()
	grant(t, s, 9, 60)
	putLease(t, s, "k", "v", 9)
	full := get(t, s, RangeRequest{Key: "k"})
	if len(full.KVs) != 1 || full.KVs[0].Lease != 9 {
		t.Fatalf("range = %+v, want k with lease 9", full.KVs)
	}
	only := get(t, s, RangeRequest{Key: "k", KeysOnly: true})
	if len(only.KVs) != 1 || only.KVs[0].Lease != 0 || only.KVs[0].ModRevision != full.KVs[0].ModRevision {
		t.Errorf("keys-only range = %+v, want k with lease 0", only.KVs)
	}
	txn, err := s.Txn(ctx, TxnRequest{Success: []Op{{Put: &PutRequest{Key: "j", Value: "v"}}, {Range: &RangeRequest{Key: "k", KeysOnly: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := txn.Responses[1].Range; r == nil || len(r.KVs) != 1 || r.KVs[0].Lease != 0 {
		t.Errorf("keys-only range in a transaction = %+v, want k with lease 0", txn.Responses[1])
	}
}
