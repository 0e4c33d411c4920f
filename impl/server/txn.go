package server

import (
	"bytes"
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/watchspec/watchspec/impl/mvcc"
)

// Txn runs a transaction (docs/SPEC.md §2.5) with etcd's checks, in etcd's
// order (v3rpc/key.go:118-137): the request (operation count, empty keys,
// empty operations, recursively into nested transactions), then
// overlapping puts and deletes in the success branch, then in the failure
// branch, then — for a transaction that may write — its size.
//
// The store runs transactions whose comparisons are on single keys and
// whose operations are plain ranges, puts and deletes. The others — nested
// transactions, comparisons over a key range or on the lease, puts with a
// lease, ignore_value or ignore_lease, unknown comparison enums — the
// server evaluates itself with etcd's rules (txn/txn.go), holding every
// other write off (see txnEmulated).
func (k *kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	s := k.s
	if err := checkTxnRequest(r, s.opts.MaxTxnOps); err != nil {
		return nil, err
	}
	if _, _, err := checkIntervals(r.GetSuccess()); err != nil {
		return nil, err
	}
	if _, _, err := checkIntervals(r.GetFailure()); err != nil {
		return nil, err
	}
	if !isTxnReadonly(r) {
		if err := s.checkSize(&pb.InternalRaftRequest{Txn: r}); err != nil {
			return nil, err
		}
		if err := s.refuseWrite("Txn", txnPuts(r)); err != nil {
			return nil, err
		}
	}
	if !storeCanRun(r) {
		return s.txnEmulated(ctx, r)
	}
	req := mvcc.TxnRequest{Success: storeOps(r.GetSuccess()), Failure: storeOps(r.GetFailure())}
	for _, c := range r.GetCompare() {
		req.Compare = append(req.Compare, storeCompare(c))
	}
	s.wmu.RLock()
	resp, err := s.st.Txn(ctx, req)
	s.wmu.RUnlock()
	if err != nil {
		return nil, toGRPCError(err)
	}
	ops := r.GetSuccess()
	if !resp.Succeeded {
		ops = r.GetFailure()
	}
	if len(resp.Responses) != len(ops) {
		// The store broke its contract; answer rather than panic.
		return nil, status.Errorf(codes.Internal, "watchspec: the store answered %d operations of %d", len(resp.Responses), len(ops))
	}
	out := &pb.TxnResponse{Header: s.header(resp.Revision), Succeeded: resp.Succeeded}
	out.Responses = make([]*pb.ResponseOp, len(ops))
	for i, op := range ops {
		out.Responses[i] = toPBOpResponse(op, resp.Responses[i])
	}
	return out, nil
}

// checkTxnRequest is etcd's (v3rpc/key.go:202-233): a nested transaction
// gets the operations left by its parent.
func checkTxnRequest(r *pb.TxnRequest, maxTxnOps int) error {
	opc := max(len(r.GetCompare()), len(r.GetSuccess()), len(r.GetFailure()))
	if opc > maxTxnOps {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, c := range r.GetCompare() {
		if len(c.GetKey()) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.GetSuccess(), r.GetFailure()} {
		for _, u := range ops {
			if err := checkRequestOp(u, maxTxnOps-opc); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkRequestOp is etcd's (v3rpc/key.go:317-332): an empty operation is
// ErrGRPCKeyNotFound.
func checkRequestOp(u *pb.RequestOp, maxTxnOps int) error {
	switch uv := u.GetRequest().(type) {
	case *pb.RequestOp_RequestRange:
		return checkRangeRequest(uv.RequestRange)
	case *pb.RequestOp_RequestPut:
		return checkPutRequest(uv.RequestPut)
	case *pb.RequestOp_RequestDeleteRange:
		return checkDeleteRequest(uv.RequestDeleteRange)
	case *pb.RequestOp_RequestTxn:
		return checkTxnRequest(uv.RequestTxn, maxTxnOps)
	}
	return rpctypes.ErrGRPCKeyNotFound
}

// interval is a deleted key range: [lo, hi), every key ≥ lo when inf, or
// the key lo alone when point.
type interval struct {
	lo, hi     string
	inf, point bool
}

func (iv interval) contains(k string) bool {
	switch {
	case iv.point:
		return k == iv.lo
	case iv.inf:
		return k >= iv.lo
	}
	return iv.lo <= k && k < iv.hi
}

type intervals []interval

func (ivs intervals) contains(k string) bool {
	for _, iv := range ivs {
		if iv.contains(k) {
			return true
		}
	}
	return false
}

// checkIntervals is etcd's (v3rpc/key.go:236-315): a put of a key that
// another put of the same level, or a delete of the level or of a nested
// transaction, also writes is ErrGRPCDuplicateKey; the branches of a nested
// transaction may put the same key. One deliberate difference: a delete
// with range end "\x00" covers every key from its key on, so a put of such
// a key is a duplicate (etcd up to 3.7 misses it, etcd#22445; the store and
// docs/SPEC.md §2.5 reject it).
func checkIntervals(reqs []*pb.RequestOp) (map[string]struct{}, intervals, error) {
	var dels intervals
	for _, req := range reqs {
		d := req.GetRequestDeleteRange()
		if d == nil {
			continue
		}
		switch end := d.GetRangeEnd(); {
		case len(end) == 0:
			dels = append(dels, interval{lo: string(d.GetKey()), point: true})
		case len(end) == 1 && end[0] == 0:
			dels = append(dels, interval{lo: string(d.GetKey()), inf: true})
		default:
			dels = append(dels, interval{lo: string(d.GetKey()), hi: string(end)})
		}
	}
	puts := make(map[string]struct{})
	for _, req := range reqs {
		t := req.GetRequestTxn()
		if t == nil {
			continue
		}
		putsThen, delsThen, err := checkIntervals(t.GetSuccess())
		if err != nil {
			return nil, dels, err
		}
		putsElse, delsElse, err := checkIntervals(t.GetFailure())
		if err != nil {
			return nil, dels, err
		}
		for k := range putsThen {
			if _, ok := puts[k]; ok || dels.contains(k) {
				return nil, dels, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		for k := range putsElse {
			if _, ok := puts[k]; ok {
				if _, safe := putsThen[k]; !safe {
					return nil, dels, rpctypes.ErrGRPCDuplicateKey
				}
			}
			if dels.contains(k) {
				return nil, dels, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		dels = append(dels, delsThen...)
		dels = append(dels, delsElse...)
	}
	for _, req := range reqs {
		p := req.GetRequestPut()
		if p == nil {
			continue
		}
		k := string(p.GetKey())
		if _, ok := puts[k]; ok || dels.contains(k) {
			return nil, dels, rpctypes.ErrGRPCDuplicateKey
		}
		puts[k] = struct{}{}
	}
	return puts, dels, nil
}

// isTxnReadonly is etcd's (txn/txn.go:352-364): every operation of both
// branches is a range. Only other transactions are size-checked, as only
// they go through raft in etcd.
func isTxnReadonly(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.GetSuccess(), r.GetFailure()} {
		for _, u := range ops {
			if u.GetRequestRange() == nil {
				return false
			}
		}
	}
	return true
}

// storeCanRun reports whether the store can run r as it is.
func storeCanRun(r *pb.TxnRequest) bool {
	for _, c := range r.GetCompare() {
		if len(c.GetRangeEnd()) != 0 {
			return false
		}
		switch c.GetTarget() {
		case pb.Compare_VALUE, pb.Compare_VERSION, pb.Compare_CREATE, pb.Compare_MOD:
		default:
			return false
		}
		switch c.GetResult() {
		case pb.Compare_EQUAL, pb.Compare_NOT_EQUAL, pb.Compare_LESS, pb.Compare_GREATER:
		default:
			return false
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.GetSuccess(), r.GetFailure()} {
		for _, u := range ops {
			switch uv := u.GetRequest().(type) {
			case *pb.RequestOp_RequestRange, *pb.RequestOp_RequestDeleteRange:
			case *pb.RequestOp_RequestPut:
				p := uv.RequestPut
				if p.GetLease() != 0 || p.GetIgnoreValue() || p.GetIgnoreLease() {
					return false
				}
			default:
				return false
			}
		}
	}
	return true
}

// storeCompare translates a comparison the store can run. A comparison
// whose operand is not of its target's kind compares with 0 or the empty
// value, as in etcd (txn/txn.go:294-321 compareKV).
func storeCompare(c *pb.Compare) mvcc.Compare {
	out := mvcc.Compare{Key: string(c.GetKey())}
	switch c.GetTarget() {
	case pb.Compare_VALUE:
		out.Target, out.Value = mvcc.TargetValue, string(c.GetValue())
	case pb.Compare_VERSION:
		out.Target, out.Number = mvcc.TargetVersion, c.GetVersion()
	case pb.Compare_CREATE:
		out.Target, out.Number = mvcc.TargetCreateRevision, c.GetCreateRevision()
	case pb.Compare_MOD:
		out.Target, out.Number = mvcc.TargetModRevision, c.GetModRevision()
	}
	switch c.GetResult() {
	case pb.Compare_EQUAL:
		out.Result = mvcc.CompareEqual
	case pb.Compare_NOT_EQUAL:
		out.Result = mvcc.CompareNotEqual
	case pb.Compare_LESS:
		out.Result = mvcc.CompareLess
	case pb.Compare_GREATER:
		out.Result = mvcc.CompareGreater
	}
	return out
}

// storeOps translates plain operations (storeCanRun holds).
func storeOps(ops []*pb.RequestOp) []mvcc.Op {
	out := make([]mvcc.Op, 0, len(ops))
	for _, u := range ops {
		switch uv := u.GetRequest().(type) {
		case *pb.RequestOp_RequestRange:
			q := storeRange(uv.RequestRange)
			out = append(out, mvcc.Op{Range: &q})
		case *pb.RequestOp_RequestPut:
			p := uv.RequestPut
			out = append(out, mvcc.Op{Put: &mvcc.PutRequest{Key: string(p.GetKey()), Value: string(p.GetValue()), PrevKV: p.GetPrevKv()}})
		case *pb.RequestOp_RequestDeleteRange:
			d := storeDelete(uv.RequestDeleteRange)
			out = append(out, mvcc.Op{Delete: &d})
		}
	}
	return out
}

// toPBOpResponse converts the store's answer to a plain operation. Nested
// headers carry only the revision (etcd fills the rest at the top level
// only, v3rpc/key.go:135).
func toPBOpResponse(op *pb.RequestOp, r mvcc.OpResponse) *pb.ResponseOp {
	switch {
	case r.Range != nil:
		rr := finishRange(op.GetRequestRange(), *r.Range)
		rr.Header = &pb.ResponseHeader{Revision: r.Range.Revision}
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: rr}}
	case r.Put != nil:
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{
			Header: &pb.ResponseHeader{Revision: r.Put.Revision}, PrevKv: toPBKV(r.Put.PrevKV),
		}}}
	case r.Delete != nil:
		d := toPBDelete(op.GetRequestDeleteRange(), *r.Delete)
		d.Header = &pb.ResponseHeader{Revision: r.Delete.Revision}
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: d}}
	}
	return &pb.ResponseOp{}
}

// txnEmulated runs a transaction the store cannot run as it is, with
// etcd's semantics (txn/txn.go Txn): the comparisons of the transaction and
// of the nested transactions on its path are evaluated against the state
// before it (compareToPath), the operations on the path are checked
// (checkTxn: ranges at a future or compacted revision, puts with a lease,
// ignore_* puts of a missing key), and the path is flattened into one store
// transaction without comparisons, whose answers are put back in shape.
//
// It holds Server.wmu alone, so no write of this server runs between the
// reads and the store transaction: the whole is one atomic step. (A writer
// that bypasses the server could break that; there is none in `watchspec
// serve`.)
func (s *Server) txnEmulated(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	e := &emulator{ctx: ctx, s: s, rev: s.st.Revision(), compact: s.st.CompactRevision()}
	path, err := e.compareToPath(r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	if _, err := e.checkTxn(r, path); err != nil {
		return nil, err
	}
	var ops []mvcc.Op
	if _, err := e.flatten(r, path, &ops); err != nil {
		return nil, err
	}
	resp, err := s.st.Txn(ctx, mvcc.TxnRequest{Success: ops})
	if err != nil {
		return nil, toGRPCError(err)
	}
	out := &pb.TxnResponse{}
	pos := 0
	e.assemble(r, path, resp.Responses, &pos, out)
	out.Header = s.header(resp.Revision)
	return out, nil
}

// emulator evaluates a transaction against the state before it.
type emulator struct {
	ctx          context.Context
	s            *Server
	rev, compact int64
}

// read returns the live key-values of [key, end) at the current revision.
func (e *emulator) read(key, end []byte, keysOnly bool) ([]mvcc.KeyValue, error) {
	rr, err := e.s.st.Range(e.ctx, mvcc.RangeRequest{Key: string(key), RangeEnd: string(end), KeysOnly: keysOnly})
	if err != nil {
		return nil, err
	}
	return rr.KVs, nil
}

// compareToPath is etcd's (txn/txn.go:240-254): which branch each
// transaction on the path takes, depth first.
func (e *emulator) compareToPath(r *pb.TxnRequest) ([]bool, error) {
	ok := true
	for _, c := range r.GetCompare() {
		holds, err := e.applyCompare(c)
		if err != nil {
			return nil, err
		}
		if !holds {
			ok = false
			break
		}
	}
	path := []bool{ok}
	ops := r.GetSuccess()
	if !ok {
		ops = r.GetFailure()
	}
	for _, op := range ops {
		if t := op.GetRequestTxn(); t != nil {
			sub, err := e.compareToPath(t)
			if err != nil {
				return nil, err
			}
			path = append(path, sub...)
		}
	}
	return path, nil
}

// applyCompare is etcd's (txn/txn.go:264-292): every key of the range must
// satisfy the comparison; with no key, a value comparison fails and the
// others compare with a zero key-value.
func (e *emulator) applyCompare(c *pb.Compare) (bool, error) {
	end := c.GetRangeEnd()
	kvs, err := e.read(c.GetKey(), end, c.GetTarget() != pb.Compare_VALUE && c.GetTarget() != pb.Compare_LEASE) // a keys-only read answers Lease 0 (SPEC §2.3)
	if err != nil {
		return false, err
	}
	if len(kvs) == 0 {
		if c.GetTarget() == pb.Compare_VALUE {
			return false, nil
		}
		return compareKV(c, &mvcc.KeyValue{}), nil
	}
	for i := range kvs {
		if !compareKV(c, &kvs[i]) {
			return false, nil
		}
	}
	return true, nil
}

// compareKV is etcd's (txn/txn.go:294-335), unknown targets and results
// included.
func compareKV(c *pb.Compare, kv *mvcc.KeyValue) bool {
	var result int
	switch c.GetTarget() {
	case pb.Compare_VALUE:
		result = bytes.Compare([]byte(kv.Value), c.GetValue())
	case pb.Compare_CREATE:
		result = cmp64(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		result = cmp64(kv.ModRevision, c.GetModRevision())
	case pb.Compare_VERSION:
		result = cmp64(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		result = cmp64(kv.Lease, c.GetLease())
	}
	switch c.GetResult() {
	case pb.Compare_EQUAL:
		return result == 0
	case pb.Compare_NOT_EQUAL:
		return result != 0
	case pb.Compare_GREATER:
		return result > 0
	case pb.Compare_LESS:
		return result < 0
	}
	return true
}

func cmp64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// branch returns the operations r runs on path.
func branch(r *pb.TxnRequest, path []bool) []*pb.RequestOp {
	if path[0] {
		return r.GetSuccess()
	}
	return r.GetFailure()
}

// checkTxn is etcd's (txn/txn.go:201-228): the operations on the path, in
// order, against the state before the transaction. It returns how many
// nested transactions it consumed from path.
func (e *emulator) checkTxn(r *pb.TxnRequest, path []bool) (int, error) {
	count := 0
	for _, op := range branch(r, path) {
		switch uv := op.GetRequest().(type) {
		case *pb.RequestOp_RequestRange:
			// txn/range.go:174-184 checkRange.
			switch rev := uv.RequestRange.GetRevision(); {
			case rev == 0:
			case rev > e.rev:
				return 0, rpctypes.ErrGRPCFutureRev
			case rev < e.compact:
				return 0, rpctypes.ErrGRPCCompacted
			}
		case *pb.RequestOp_RequestPut:
			// txn/put.go:117-125 checkPut.
			p := uv.RequestPut
			if p.GetLease() != 0 && !e.s.leaseExists(p.GetLease()) {
				return 0, rpctypes.ErrGRPCLeaseNotFound
			}
			if p.GetIgnoreValue() || p.GetIgnoreLease() {
				kvs, err := e.read(p.GetKey(), nil, false) // the key's lease too: a keys-only read answers Lease 0 (SPEC §2.3)
				if err != nil {
					return 0, toGRPCError(err)
				}
				if len(kvs) == 0 {
					return 0, rpctypes.ErrGRPCKeyNotFound
				}
			}
		case *pb.RequestOp_RequestTxn:
			n, err := e.checkTxn(uv.RequestTxn, path[1:])
			if err != nil {
				return 0, err
			}
			count += n + 1
			path = path[n+1:]
		}
	}
	return count, nil
}

// flatten appends the store operations of the path to ops and returns how
// many nested transactions it consumed from path. An ignore_value put
// writes the key's value from before the transaction: checkIntervals
// guarantees that nothing earlier in the transaction wrote that key.
func (e *emulator) flatten(r *pb.TxnRequest, path []bool, ops *[]mvcc.Op) (int, error) {
	count := 0
	for _, op := range branch(r, path) {
		switch uv := op.GetRequest().(type) {
		case *pb.RequestOp_RequestRange:
			q := storeRange(uv.RequestRange)
			*ops = append(*ops, mvcc.Op{Range: &q})
		case *pb.RequestOp_RequestPut:
			p := uv.RequestPut
			val, lease := string(p.GetValue()), p.GetLease()
			if p.GetIgnoreValue() || p.GetIgnoreLease() {
				kvs, err := e.read(p.GetKey(), nil, false)
				if err != nil {
					return 0, toGRPCError(err)
				}
				if len(kvs) == 0 {
					return 0, rpctypes.ErrGRPCKeyNotFound
				}
				if p.GetIgnoreValue() {
					val = kvs[0].Value
				}
				if p.GetIgnoreLease() {
					lease = kvs[0].Lease
				}
			}
			*ops = append(*ops, mvcc.Op{Put: &mvcc.PutRequest{Key: string(p.GetKey()), Value: val, PrevKV: p.GetPrevKv(), Lease: lease}})
		case *pb.RequestOp_RequestDeleteRange:
			d := storeDelete(uv.RequestDeleteRange)
			*ops = append(*ops, mvcc.Op{Delete: &d})
		case *pb.RequestOp_RequestTxn:
			n, err := e.flatten(uv.RequestTxn, path[1:], ops)
			if err != nil {
				return 0, err
			}
			count += n + 1
			path = path[n+1:]
		}
	}
	return count, nil
}

// assemble puts the store's answers to the flattened operations back into
// the shape of r on path. A nested transaction's header is empty, as
// etcd's is (txn/txn.go:137-162 newTxnResp sets none, and only the top
// level's is filled).
func (e *emulator) assemble(r *pb.TxnRequest, path []bool, resps []mvcc.OpResponse, pos *int, out *pb.TxnResponse) int {
	out.Succeeded = path[0]
	ops := branch(r, path)
	out.Responses = make([]*pb.ResponseOp, len(ops))
	count := 0
	for i, op := range ops {
		if t := op.GetRequestTxn(); t != nil {
			sub := &pb.TxnResponse{Header: &pb.ResponseHeader{}}
			n := e.assemble(t, path[1:], resps, pos, sub)
			count += n + 1
			path = path[n+1:]
			out.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: sub}}
			continue
		}
		if *pos < len(resps) {
			out.Responses[i] = toPBOpResponse(op, resps[*pos])
			*pos++
		}
	}
	return count
}
