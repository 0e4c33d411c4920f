package server

import (
	"bytes"
	"context"
	"math"
	"runtime"
	"sort"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/watchspec/watchspec/impl/mvcc"
)

// kvServer is etcd's KV service over the store.
type kvServer struct {
	pb.UnimplementedKVServer // RangeStream is not implemented

	s     *Server
	reads readSlots // bounds the Ranges served at once
}

// readSlots bounds how many Range requests read the store and build their
// responses at once (its zero value is ready to use). Under more reads than
// the cores serve, every waiting Range would otherwise be a runnable
// goroutine, and each step of a write — its handler, the store's
// committer, its answer — would queue behind all of them on the
// scheduler: the writer starved (docs/PERFORMANCE.md, "Writes under read
// overload"). Ranges beyond the bound wait parked, in arrival order, so a
// write's goroutines run soon. etcd's linearizable reads wait likewise,
// parked until its read loop confirms the read index
// (etcdserver/v3_server.go linearizableReadNotify), which is what keeps its
// writer going. A Range still reads the store's current view when it runs,
// inside its request's lifetime: it stays linearizable (docs/SPEC.md §2.7).
type readSlots struct {
	once  sync.Once
	slots chan struct{}
}

// acquire takes a slot, or fails when ctx ends first.
func (r *readSlots) acquire(ctx context.Context) error {
	r.once.Do(func() { r.slots = make(chan struct{}, 2*runtime.GOMAXPROCS(0)) })
	select {
	case r.slots <- struct{}{}:
		return nil
	default:
	}
	select {
	case r.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *readSlots) release() { <-r.slots }

// Range reads a range (docs/SPEC.md §2.3). Like etcd (v3rpc/key.go:153-167
// checkRangeRequest) it validates only the key and the sort options;
// negative revisions and limits and a range end at or below the key are
// served (current revision, no limit, nothing). The header revision is the
// current revision, whatever revision was read (txn/range.go:162).
func (k *kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := checkRangeRequest(r); err != nil {
		return nil, err
	}
	s := k.s
	if err := k.reads.acquire(ctx); err != nil {
		return nil, toGRPCError(err)
	}
	defer k.reads.release()
	rr, err := s.st.Range(ctx, storeRange(r))
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp := finishRange(r, rr)
	resp.Header = s.header(rr.Revision)
	return resp, nil
}

// Put writes a key (§2.1, §2.2). The checks and their order are etcd's:
// the request (v3rpc/key.go:182-193 checkPutRequest), its size
// (v3_server.go:1093-1099), the alarms (alarm.go), the lease (txn/put.go:80-88 checkLease; the
// store checks it again as it applies the put, see lease.go), then ignore_value and
// ignore_lease, which need the key to exist (txn/put.go:90-102
// checkAndGetPrevKV).
func (k *kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := checkPutRequest(r); err != nil {
		return nil, err
	}
	s := k.s
	if err := s.checkSize(&pb.InternalRaftRequest{Put: r}); err != nil {
		return nil, err
	}
	// The alarms first: etcd's capped and corrupt appliers refuse the put
	// before the backend looks at its lease (apply/capped.go, corrupt.go).
	if err := s.refuseWrite("Put", true); err != nil {
		return nil, err
	}
	if r.Lease != 0 && !s.leaseExists(r.Lease) {
		return nil, rpctypes.ErrGRPCLeaseNotFound
	}
	if r.IgnoreValue || r.IgnoreLease {
		return s.putIgnoring(ctx, r)
	}
	s.wmu.RLock()
	resp, err := s.st.Put(ctx, mvcc.PutRequest{Key: string(r.Key), Value: string(r.Value), PrevKV: r.PrevKv, Lease: r.Lease})
	s.wmu.RUnlock()
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.PutResponse{Header: s.header(resp.Revision), PrevKv: toPBKV(resp.PrevKV)}, nil
}

// putIgnoring serves a put with ignore_value or ignore_lease: the key must
// exist, and ignore_value keeps its value. The store has no such put, so
// the server reads the key and writes it with every other write held off
// (see Server.wmu): the read and the write are one atomic step.
func (s *Server) putIgnoring(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	cur, err := s.st.Range(ctx, mvcc.RangeRequest{Key: string(r.Key)})
	if err != nil {
		return nil, toGRPCError(err)
	}
	if len(cur.KVs) == 0 {
		return nil, rpctypes.ErrGRPCKeyNotFound
	}
	val, lease := string(r.Value), r.Lease
	if r.IgnoreValue {
		val = cur.KVs[0].Value
	}
	if r.IgnoreLease {
		lease = cur.KVs[0].Lease // etcd's put (txn/put.go): the key keeps its lease
	}
	resp, err := s.st.Put(ctx, mvcc.PutRequest{Key: string(r.Key), Value: val, PrevKV: r.PrevKv, Lease: lease})
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.PutResponse{Header: s.header(resp.Revision), PrevKv: toPBKV(resp.PrevKV)}, nil
}

// DeleteRange removes the live keys of a range. Only the key is checked
// (v3rpc/key.go:195-200); a deletion that removes nothing does not move the
// revision (mvcc/kvstore_txn.go:197-202).
func (k *kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if err := checkDeleteRequest(r); err != nil {
		return nil, err
	}
	s := k.s
	if err := s.checkSize(&pb.InternalRaftRequest{DeleteRange: r}); err != nil {
		return nil, err
	}
	if err := s.refuseWrite("DeleteRange", false); err != nil {
		return nil, err
	}
	s.wmu.RLock()
	resp, err := s.st.Delete(ctx, storeDelete(r))
	s.wmu.RUnlock()
	if err != nil {
		return nil, toGRPCError(err)
	}
	out := toPBDelete(r, resp)
	out.Header = s.header(resp.Revision)
	return out, nil
}

// Compact compacts the history below r.Revision (§2.4). etcd validates
// nothing here (v3rpc/key.go:139-151); the store answers ErrCompacted for a
// revision at or below the compact revision and ErrFutureRev above the
// current one (mvcc/kvstore.go:197-222 updateCompactRev). The physical flag
// is accepted, but the call returns once the compaction is in force, not
// once its records are deleted.
func (k *kvServer) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	s := k.s
	if err := s.checkSize(&pb.InternalRaftRequest{Compaction: r}); err != nil {
		return nil, err
	}
	if err := s.refuseWrite("Compaction", false); err != nil {
		return nil, err
	}
	s.wmu.RLock()
	resp, err := s.st.Compact(ctx, r.Revision)
	s.wmu.RUnlock()
	if err != nil {
		return nil, toGRPCError(err)
	}
	s.log.Info("compacted", "revision", r.Revision, "physical", r.Physical, "current-revision", resp.Revision)
	return &pb.CompactionResponse{Header: s.header(resp.Revision)}, nil
}

// checkSize rejects a write whose raft request would exceed MaxRequestBytes,
// measured as etcd measures it: the marshalled InternalRaftRequest with its
// request header (v3_server.go:1067-1101 processInternalRaftRequestOnce).
func (s *Server) checkSize(r *pb.InternalRaftRequest) error {
	r.Header = &pb.RequestHeader{ID: s.reqID.Add(1)}
	if proto.Size(r) > s.opts.MaxRequestBytes {
		return rpctypes.ErrGRPCRequestTooLarge
	}
	return nil
}

// checkRangeRequest is etcd's (v3rpc/key.go:153-167).
func checkRangeRequest(r *pb.RangeRequest) error {
	if len(r.GetKey()) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.GetSortOrder())]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.GetSortTarget())]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	return nil
}

// checkPutRequest is etcd's (v3rpc/key.go:182-193).
func checkPutRequest(r *pb.PutRequest) error {
	if len(r.GetKey()) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if r.GetIgnoreValue() && len(r.GetValue()) != 0 {
		return rpctypes.ErrGRPCValueProvided
	}
	if r.GetIgnoreLease() && r.GetLease() != 0 {
		return rpctypes.ErrGRPCLeaseProvided
	}
	return nil
}

// checkDeleteRequest is etcd's (v3rpc/key.go:195-200).
func checkDeleteRequest(r *pb.DeleteRangeRequest) error {
	if len(r.GetKey()) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	return nil
}

// rangeLimit is etcd's (txn/range.go:86-95): the limit the store reads
// with. It is lifted for a sort other than by key ascending and for min/max
// revision filters, which apply before the limit; otherwise one more key is
// read than asked for, so that More can be told — and a sort with order
// NONE on another target still sorts those keys (etcd's quirk, kept).
func rangeLimit(r *pb.RangeRequest) int64 {
	limit := r.GetLimit()
	if !isDefaultOrdering(r.GetSortTarget(), r.GetSortOrder()) ||
		r.GetMinModRevision() != 0 || r.GetMaxModRevision() != 0 ||
		r.GetMinCreateRevision() != 0 || r.GetMaxCreateRevision() != 0 {
		limit = 0
	}
	if limit > 0 && limit < math.MaxInt64 {
		limit++
	}
	return limit
}

func isDefaultOrdering(t pb.RangeRequest_SortTarget, o pb.RangeRequest_SortOrder) bool {
	return o == pb.RangeRequest_NONE || (t == pb.RangeRequest_KEY && o == pb.RangeRequest_ASCEND)
}

// storeRange translates a range for the store.
func storeRange(r *pb.RangeRequest) mvcc.RangeRequest {
	return mvcc.RangeRequest{
		Key: string(r.GetKey()), RangeEnd: string(r.GetRangeEnd()), Revision: r.GetRevision(),
		Limit: rangeLimit(r), CountOnly: r.GetCountOnly(),
		// The values are needed to sort by value (txn/range.go:67 FastKeysOnly).
		KeysOnly: r.GetKeysOnly() && r.GetSortTarget() != pb.RangeRequest_VALUE,
	}
}

// finishRange turns the store's answer into etcd's: filters, sort and limit
// applied as txn/range.go:105-169 (executeRange, asembleRangeResponse)
// applies them. Count is the store's, counted before the filters and
// whatever the limit, as etcd's is.
func finishRange(r *pb.RangeRequest, rr mvcc.RangeResponse) *pb.RangeResponse {
	kvs := make([]*mvccpb.KeyValue, len(rr.KVs))
	for i := range rr.KVs {
		kvs[i] = toPBKV(&rr.KVs[i])
	}
	kvs = filterKVs(kvs, r)
	sortKVs(kvs, r)
	more := false
	if r.GetLimit() > 0 && int64(len(kvs)) > r.GetLimit() {
		kvs = kvs[:r.GetLimit()]
		more = true
	}
	if r.GetKeysOnly() {
		for _, kv := range kvs {
			kv.Value = nil
		}
	}
	return &pb.RangeResponse{Kvs: kvs, More: more, Count: rr.Count}
}

// filterKVs is etcd's filterRangeResults (txn/range.go:110-123).
func filterKVs(kvs []*mvccpb.KeyValue, r *pb.RangeRequest) []*mvccpb.KeyValue {
	prune := func(drop func(*mvccpb.KeyValue) bool) {
		j := 0
		for _, kv := range kvs {
			if !drop(kv) {
				kvs[j] = kv
				j++
			}
		}
		kvs = kvs[:j]
	}
	if m := r.GetMaxModRevision(); m != 0 {
		prune(func(kv *mvccpb.KeyValue) bool { return kv.ModRevision > m })
	}
	if m := r.GetMinModRevision(); m != 0 {
		prune(func(kv *mvccpb.KeyValue) bool { return kv.ModRevision < m })
	}
	if m := r.GetMaxCreateRevision(); m != 0 {
		prune(func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision > m })
	}
	if m := r.GetMinCreateRevision(); m != 0 {
		prune(func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision < m })
	}
	return kvs
}

// sortKVs is etcd's sortRangeResults (txn/range.go:125-154), including its
// use of the unstable sort.Sort, so that ties come out in etcd's order.
func sortKVs(kvs []*mvccpb.KeyValue, r *pb.RangeRequest) {
	order := r.GetSortOrder()
	if r.GetSortTarget() != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE {
		order = pb.RangeRequest_ASCEND
	}
	if isDefaultOrdering(r.GetSortTarget(), order) {
		return
	}
	var less func(a, b *mvccpb.KeyValue) bool
	switch r.GetSortTarget() {
	case pb.RangeRequest_KEY:
		less = func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Key, b.Key) < 0 }
	case pb.RangeRequest_VERSION:
		less = func(a, b *mvccpb.KeyValue) bool { return a.Version-b.Version < 0 }
	case pb.RangeRequest_CREATE:
		less = func(a, b *mvccpb.KeyValue) bool { return a.CreateRevision-b.CreateRevision < 0 }
	case pb.RangeRequest_MOD:
		less = func(a, b *mvccpb.KeyValue) bool { return a.ModRevision-b.ModRevision < 0 }
	case pb.RangeRequest_VALUE:
		less = func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Value, b.Value) < 0 }
	default:
		return // checkRangeRequest rejected it
	}
	var sorter sort.Interface = kvSorter{kvs, less}
	switch order {
	case pb.RangeRequest_ASCEND:
		sort.Sort(sorter)
	case pb.RangeRequest_DESCEND:
		sort.Sort(sort.Reverse(sorter))
	}
}

type kvSorter struct {
	kvs  []*mvccpb.KeyValue
	less func(a, b *mvccpb.KeyValue) bool
}

func (s kvSorter) Len() int           { return len(s.kvs) }
func (s kvSorter) Swap(i, j int)      { s.kvs[i], s.kvs[j] = s.kvs[j], s.kvs[i] }
func (s kvSorter) Less(i, j int) bool { return s.less(s.kvs[i], s.kvs[j]) }

func storeDelete(r *pb.DeleteRangeRequest) mvcc.DeleteRequest {
	return mvcc.DeleteRequest{Key: string(r.GetKey()), RangeEnd: string(r.GetRangeEnd()), PrevKV: r.GetPrevKv()}
}

func toPBDelete(r *pb.DeleteRangeRequest, d mvcc.DeleteResponse) *pb.DeleteRangeResponse {
	out := &pb.DeleteRangeResponse{Deleted: d.Deleted}
	if r.GetPrevKv() {
		out.PrevKvs = make([]*mvccpb.KeyValue, len(d.PrevKVs))
		for i := range d.PrevKVs {
			out.PrevKvs[i] = toPBKV(&d.PrevKVs[i])
		}
	}
	return out
}

// toPBKV converts a key-value; nil stays nil.
func toPBKV(kv *mvcc.KeyValue) *mvccpb.KeyValue {
	if kv == nil {
		return nil
	}
	out := &mvccpb.KeyValue{
		Key:            []byte(kv.Key),
		CreateRevision: kv.CreateRevision,
		ModRevision:    kv.ModRevision,
		Version:        kv.Version,
		Lease:          kv.Lease,
	}
	if kv.Value != "" {
		out.Value = []byte(kv.Value)
	}
	return out
}
