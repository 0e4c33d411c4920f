package record

import (
	"context"
	"fmt"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/watchspec/watchspec/model/kv"
)

// NewKV returns a clientv3.KV that sends every call to inner and records
// it, in the way clientv3/namespace wraps a KV, so that code which already
// uses a client is recorded unchanged:
//
//	cli.KV = rec.NewKV(cli.KV)
//
// The KV is safe for concurrent use: each call is recorded as one of the
// trace's clients, never used by two calls at once. A call the model
// cannot express — sorting, the min/max revision filters, a compare on a
// lease or over a range of keys, a nested transaction — is not sent: it
// fails with an error that names it, since a write that goes unrecorded
// would break the checker's first precondition (see the package doc).
// Leases, WithIgnoreValue and WithIgnoreLease cannot be seen through a
// clientv3.Op: a put with them is recorded as a plain put, so do not use
// them through a recording KV.
func (r *Recorder) NewKV(inner clientv3.KV) clientv3.KV {
	return &recordingKV{rec: r, inner: inner}
}

type recordingKV struct {
	rec   *Recorder
	inner clientv3.KV
	mu    sync.Mutex
	idle  []*Client
}

// take returns a client no other call is using.
func (k *recordingKV) take() *Client {
	k.mu.Lock()
	defer k.mu.Unlock()
	if n := len(k.idle); n > 0 {
		c := k.idle[n-1]
		k.idle = k.idle[:n-1]
		return c
	}
	id := int(k.rec.clients.Add(1))
	return &Client{rec: k.rec, c: k.inner, id: id, first: id}
}

func (k *recordingKV) give(c *Client) {
	k.mu.Lock()
	k.idle = append(k.idle, c)
	k.mu.Unlock()
}

func (k *recordingKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	r, err := k.Do(ctx, clientv3.OpPut(key, val, opts...))
	return r.Put(), err
}

func (k *recordingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	r, err := k.Do(ctx, clientv3.OpGet(key, opts...))
	return r.Get(), err
}

func (k *recordingKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	r, err := k.Do(ctx, clientv3.OpDelete(key, opts...))
	return r.Del(), err
}

func (k *recordingKV) Compact(ctx context.Context, rev int64, opts ...clientv3.CompactOption) (*clientv3.CompactResponse, error) {
	c := k.take()
	defer k.give(c)
	req := kv.Request{Compact: &kv.CompactRequest{Revision: rev}}
	call := k.rec.Now()
	r, err := k.inner.Compact(ctx, rev, opts...)
	var resp kv.Response
	if err == nil {
		resp = kv.Response{Revision: r.Header.Revision, Compact: &kv.CompactResponse{}}
	}
	_, lerr := c.log(req, false, call, k.rec.Now(), resp, err)
	if err == nil {
		err = lerr
	}
	return r, err
}

// Do records op, a get, put, delete or transaction.
func (k *recordingKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	req, serializable, err := fromOp(op)
	if err != nil {
		return clientv3.OpResponse{}, err
	}
	c := k.take()
	defer k.give(c)
	call := k.rec.Now()
	r, err := k.inner.Do(ctx, op)
	var resp kv.Response
	if err == nil {
		resp = fromOpResponse(r)
	}
	_, lerr := c.log(req, serializable, call, k.rec.Now(), resp, err)
	if err == nil {
		err = lerr
	}
	return r, err
}

func (k *recordingKV) Txn(ctx context.Context) clientv3.Txn {
	return &recordingTxn{kv: k, ctx: ctx}
}

// recordingTxn collects a transaction and sends it through Do on Commit.
type recordingTxn struct {
	kv        *recordingKV
	ctx       context.Context
	cmps      []clientv3.Cmp
	then, els []clientv3.Op
}

func (t *recordingTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.cmps = append(t.cmps, cs...)
	return t
}

func (t *recordingTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.then = append(t.then, ops...)
	return t
}

func (t *recordingTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.els = append(t.els, ops...)
	return t
}

func (t *recordingTxn) Commit() (*clientv3.TxnResponse, error) {
	r, err := t.kv.Do(t.ctx, clientv3.OpTxn(t.cmps, t.then, t.els))
	return r.Txn(), err
}

// fromOp is op in the model's terms, or an error naming what the model
// cannot express.
func fromOp(op clientv3.Op) (kv.Request, bool, error) {
	if op.IsTxn() {
		cmps, then, els := op.Txn()
		t := &kv.TxnRequest{}
		for _, c := range cmps {
			mc, err := fromCmp(c)
			if err != nil {
				return kv.Request{}, false, err
			}
			t.Compare = append(t.Compare, mc)
		}
		for _, ops := range []struct {
			in  []clientv3.Op
			out *[]kv.Op
		}{{then, &t.Success}, {els, &t.Failure}} {
			for _, o := range ops.in {
				if o.IsTxn() {
					return kv.Request{}, false, fmt.Errorf("record: a nested transaction cannot be recorded (the model has none)")
				}
				r, _, err := fromOp(o)
				if err != nil {
					return kv.Request{}, false, err
				}
				*ops.out = append(*ops.out, kv.Op{Range: r.Range, Put: r.Put, Delete: r.Delete})
			}
		}
		return kv.Request{Txn: t}, false, nil
	}
	// What OpGet/OpPut/OpDelete accept and the model does not know.
	if op.IsSortSet() || op.MinModRev() != 0 || op.MaxModRev() != 0 || op.MinCreateRev() != 0 || op.MaxCreateRev() != 0 {
		return kv.Request{}, false, fmt.Errorf("record: %q: sorting and min/max revision filters cannot be recorded (the model has none)", op.KeyBytes())
	}
	key, end := string(op.KeyBytes()), string(op.RangeBytes())
	switch {
	case op.IsGet():
		return kv.Request{Range: &kv.RangeRequest{Key: key, RangeEnd: end, Revision: op.Rev(), Limit: op.Limit(),
			CountOnly: op.IsCountOnly(), KeysOnly: op.IsKeysOnly()}}, op.IsSerializable(), nil
	case op.IsPut():
		return kv.Request{Put: &kv.PutRequest{Key: key, Value: string(op.ValueBytes()), PrevKV: op.IsPrevKV()}}, false, nil
	case op.IsDelete():
		return kv.Request{Delete: &kv.DeleteRequest{Key: key, RangeEnd: end, PrevKV: op.IsPrevKV()}}, false, nil
	}
	return kv.Request{}, false, fmt.Errorf("record: an operation that is neither get, put, delete nor transaction cannot be recorded")
}

// fromCmp is c in the model's terms.
func fromCmp(cmp clientv3.Cmp) (kv.Compare, error) {
	c := cmp.GetCompare()
	mc := kv.Compare{Key: string(c.Key)}
	if len(c.RangeEnd) > 0 {
		return kv.Compare{}, fmt.Errorf("record: a compare over a range of keys (%q) cannot be recorded (the model compares one key)", c.Key)
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		mc.Result = kv.CompareEqual
	case pb.Compare_NOT_EQUAL:
		mc.Result = kv.CompareNotEqual
	case pb.Compare_LESS:
		mc.Result = kv.CompareLess
	case pb.Compare_GREATER:
		mc.Result = kv.CompareGreater
	}
	switch c.Target {
	case pb.Compare_VALUE:
		mc.Target, mc.Value = kv.TargetValue, string(c.GetValue())
	case pb.Compare_VERSION:
		mc.Target, mc.Number = kv.TargetVersion, c.GetVersion()
	case pb.Compare_CREATE:
		mc.Target, mc.Number = kv.TargetCreateRevision, c.GetCreateRevision()
	case pb.Compare_MOD:
		mc.Target, mc.Number = kv.TargetModRevision, c.GetModRevision()
	default:
		return kv.Compare{}, fmt.Errorf("record: a compare on %s of %q cannot be recorded (the model has no leases)", c.Target, c.Key)
	}
	return mc, nil
}

// GetStream is passed to inner unrecorded: a streamed range arrives in
// parts, which the trace format cannot say. A read left out of the trace
// weakens the check but breaks none of its preconditions.
func (k *recordingKV) GetStream(ctx context.Context, key string, opts ...clientv3.OpOption) (clientv3.GetStreamChan, error) {
	return k.inner.GetStream(ctx, key, opts...)
}
