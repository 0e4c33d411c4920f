package proptest

import (
	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
	"github.com/watchspec/watchspec/impl/watchhub"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
)

// This file translates between the model's types and the implementation's.
// The implementation never imports the model; only these tests know both.

func toImplRange(r kv.RangeRequest) mvcc.RangeRequest {
	return mvcc.RangeRequest{Key: r.Key, RangeEnd: r.RangeEnd, Revision: r.Revision, Limit: r.Limit, CountOnly: r.CountOnly, KeysOnly: r.KeysOnly}
}

func toImplOps(ops []kv.Op) []mvcc.Op {
	var out []mvcc.Op
	for _, op := range ops {
		var o mvcc.Op
		if op.Range != nil {
			r := toImplRange(*op.Range)
			o.Range = &r
		}
		if op.Put != nil {
			o.Put = &mvcc.PutRequest{Key: op.Put.Key, Value: op.Put.Value, PrevKV: op.Put.PrevKV, Lease: op.Put.Lease}
		}
		if op.Delete != nil {
			o.Delete = &mvcc.DeleteRequest{Key: op.Delete.Key, RangeEnd: op.Delete.RangeEnd, PrevKV: op.Delete.PrevKV}
		}
		out = append(out, o)
	}
	return out
}

func toImplTxn(t kv.TxnRequest) mvcc.TxnRequest {
	out := mvcc.TxnRequest{Success: toImplOps(t.Success), Failure: toImplOps(t.Failure)}
	for _, c := range t.Compare {
		out.Compare = append(out.Compare, mvcc.Compare{
			Key: c.Key, Target: mvcc.CompareTarget(c.Target), Result: mvcc.CompareResult(c.Result), Value: c.Value, Number: c.Number,
		})
	}
	return out
}

func fromKV(k mvcc.KeyValue) kv.KeyValue {
	return kv.KeyValue{Key: k.Key, Value: k.Value, CreateRevision: k.CreateRevision, ModRevision: k.ModRevision, Version: k.Version, Lease: k.Lease}
}

func fromKVPtr(k *mvcc.KeyValue) *kv.KeyValue {
	if k == nil {
		return nil
	}
	c := fromKV(*k)
	return &c
}

func fromKVs(kvs []mvcc.KeyValue) []kv.KeyValue {
	var out []kv.KeyValue
	for _, k := range kvs {
		out = append(out, fromKV(k))
	}
	return out
}

func fromRange(r mvcc.RangeResponse) *kv.RangeResponse {
	return &kv.RangeResponse{KVs: fromKVs(r.KVs), More: r.More, Count: r.Count}
}

func fromPut(r mvcc.PutResponse) *kv.PutResponse { return &kv.PutResponse{PrevKV: fromKVPtr(r.PrevKV)} }

func fromDelete(r mvcc.DeleteResponse) *kv.DeleteResponse {
	return &kv.DeleteResponse{Deleted: r.Deleted, PrevKVs: fromKVs(r.PrevKVs)}
}

func fromTxn(r mvcc.TxnResponse) *kv.TxnResponse {
	out := &kv.TxnResponse{Succeeded: r.Succeeded}
	for _, op := range r.Responses {
		var o kv.OpResponse
		switch {
		case op.Range != nil:
			o.Range = fromRange(*op.Range)
		case op.Put != nil:
			o.Put = fromPut(*op.Put)
		case op.Delete != nil:
			o.Delete = fromDelete(*op.Delete)
		}
		out.Responses = append(out.Responses, o)
	}
	return out
}

// do runs a model request against the implementation and returns its answer
// in the model's terms. Errors pass through unchanged: kv.SameResponse
// compares them by text, which must be the model's (etcd's).
func do(s *store.Store, req kv.Request) kv.Response {
	switch {
	case req.Range != nil:
		r, err := s.Range(ctx, toImplRange(*req.Range))
		if err != nil {
			return kv.Response{Err: err}
		}
		return kv.Response{Revision: r.Revision, Range: fromRange(r)}
	case req.Put != nil:
		r, err := s.Put(ctx, mvcc.PutRequest{Key: req.Put.Key, Value: req.Put.Value, PrevKV: req.Put.PrevKV, Lease: req.Put.Lease})
		if err != nil {
			return kv.Response{Err: err}
		}
		return kv.Response{Revision: r.Revision, Put: fromPut(r)}
	case req.Delete != nil:
		r, err := s.Delete(ctx, mvcc.DeleteRequest{Key: req.Delete.Key, RangeEnd: req.Delete.RangeEnd, PrevKV: req.Delete.PrevKV})
		if err != nil {
			return kv.Response{Err: err}
		}
		return kv.Response{Revision: r.Revision, Delete: fromDelete(r)}
	case req.Txn != nil:
		r, err := s.Txn(ctx, toImplTxn(*req.Txn))
		if err != nil {
			return kv.Response{Err: err}
		}
		return kv.Response{Revision: r.Revision, Txn: fromTxn(r)}
	default:
		r, err := s.Compact(ctx, req.Compact.Revision)
		if err != nil {
			return kv.Response{Err: err}
		}
		return kv.Response{Revision: r.Revision, Compact: &kv.CompactResponse{}}
	}
}

func fromEvent(e mvcc.Event) kv.Event {
	return kv.Event{Type: kv.EventType(e.Type), KV: fromKV(e.KV), PrevKV: fromKVPtr(e.PrevKV)}
}

func fromWatchResponse(r watchhub.Response) watch.Response {
	out := watch.Response{Revision: r.Revision, Created: r.Created, Canceled: r.Canceled, CompactRevision: r.CompactRevision, CancelReason: r.CancelReason}
	for _, e := range r.Events {
		out.Events = append(out.Events, fromEvent(e))
	}
	return out
}

// toModelWatch returns the model's view of a watch request. An empty key
// means "\x00", in the hub as in etcd.
func toModelWatch(r watchhub.Request) watch.Request {
	key := r.Key
	if key == "" {
		key = "\x00"
	}
	return watch.Request{Key: key, RangeEnd: r.RangeEnd, StartRevision: r.StartRevision, NoPut: r.NoPut, NoDelete: r.NoDelete, PrevKV: r.PrevKV, ProgressNotify: r.ProgressNotify}
}
