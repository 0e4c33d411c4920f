package record

import (
	"context"
	"errors"
	"slices"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/watchspec/watchspec/model/lease"
	"github.com/watchspec/watchspec/traces"
)

// NewLease wraps l so that every lease operation made through it is
// recorded as a "lease" record of the trace (docs/SPEC.md §2.9), under a
// client id of its own, in the shape clientv3/namespace wraps a client:
//
//	cli.Lease = rec.NewLease(cli.Lease)
//	g, err := cli.Grant(ctx, 5)                    // recorded
//	_, err = cli.Put(ctx, "k", "v", clientv3.WithLease(g.ID)) // record the put through Client.Do with PutRequest.Lease
//
// What is recorded: Grant (ID chosen by the server: clientv3 cannot ask
// for one), Revoke, TimeToLive (keys recorded as asked when the answer
// carries keys), Leases, KeepAliveOnce (its call and return: the tight
// bound §2.11 LeaseExpiry needs), and each answer of a KeepAlive stream.
// clientv3 sends a stream's requests itself, unseen, so each of its
// answers is recorded with the stream's start as its call: a checker can
// then only count the lease's TTL from there. A workload that wants
// expiry judged tightly uses KeepAliveOnce.
//
// An answer of the server — including "requested lease not found" — is an
// outcome; any other failure leaves the outcome unknown, as for [Client.Do].
func (r *Recorder) NewLease(l clientv3.Lease) clientv3.Lease {
	return &leaseRecorder{rec: r, l: l, client: int(r.clients.Add(1))}
}

type leaseRecorder struct {
	rec    *Recorder
	l      clientv3.Lease
	client int
}

// write records one lease operation; err is the client's error, which
// leaves the outcome unknown unless the server answered it.
func (lr *leaseRecorder) write(call int64, req lease.Request, resp *lease.Response, err error) error {
	op := traces.LeaseOp{Client: lr.client, Call: call, Return: lr.rec.Now(), Request: req}
	if err != nil {
		if known := leaseError(err); known != nil {
			resp = &lease.Response{Err: known}
		} else {
			op.Error = err.Error()
			resp = nil
		}
	}
	op.Response = resp
	return lr.rec.w.LeaseOp(op)
}

// leaseError maps etcd's lease errors to the model's; nil for any other.
func leaseError(err error) error {
	desc := rpctypes.ErrorDesc(err)
	for _, e := range []struct{ server, model error }{
		{rpctypes.ErrGRPCLeaseNotFound, lease.ErrNotFound},
		{rpctypes.ErrGRPCLeaseExist, lease.ErrExist},
		{rpctypes.ErrGRPCLeaseTTLTooLarge, lease.ErrTTLTooLarge},
	} {
		if desc == rpctypes.ErrorDesc(e.server) {
			return e.model
		}
	}
	return nil
}

func revision(h interface{ GetRevision() int64 }) int64 {
	if h == nil {
		return 0
	}
	return h.GetRevision()
}

func (lr *leaseRecorder) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	call := lr.rec.Now()
	g, err := lr.l.Grant(ctx, ttl)
	var resp *lease.Response
	if err == nil {
		resp = &lease.Response{Revision: revision(g.ResponseHeader), ID: int64(g.ID), TTL: g.TTL}
	}
	return g, errors.Join(err, lr.write(call, lease.Request{Grant: &lease.GrantRequest{TTL: ttl}}, resp, err))
}

func (lr *leaseRecorder) Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	call := lr.rec.Now()
	v, err := lr.l.Revoke(ctx, id)
	var resp *lease.Response
	if err == nil {
		resp = &lease.Response{Revision: revision(v.Header)}
	}
	return v, errors.Join(err, lr.write(call, lease.Request{Revoke: &lease.RevokeRequest{ID: int64(id)}}, resp, err))
}

func (lr *leaseRecorder) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	call := lr.rec.Now()
	t, err := lr.l.TimeToLive(ctx, id, opts...)
	req := lease.TimeToLiveRequest{ID: int64(id)}
	var resp *lease.Response
	if err == nil {
		resp = &lease.Response{Revision: revision(t.ResponseHeader), ID: int64(t.ID), TTL: t.TTL, GrantedTTL: t.GrantedTTL}
		for _, k := range t.Keys {
			resp.Keys = append(resp.Keys, string(k))
		}
		slices.Sort(resp.Keys)
		req.Keys = len(t.Keys) > 0
	}
	return t, errors.Join(err, lr.write(call, lease.Request{TimeToLive: &req}, resp, err))
}

func (lr *leaseRecorder) Leases(ctx context.Context) (*clientv3.LeaseLeasesResponse, error) {
	call := lr.rec.Now()
	ls, err := lr.l.Leases(ctx)
	var resp *lease.Response
	if err == nil {
		resp = &lease.Response{Revision: revision(ls.ResponseHeader)}
		for _, s := range ls.Leases {
			resp.IDs = append(resp.IDs, int64(s.ID))
		}
		slices.Sort(resp.IDs)
	}
	return ls, errors.Join(err, lr.write(call, lease.Request{Leases: &lease.LeasesRequest{}}, resp, err))
}

func (lr *leaseRecorder) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	call := lr.rec.Now()
	k, err := lr.l.KeepAliveOnce(ctx, id)
	req := lease.Request{KeepAlive: &lease.KeepAliveRequest{ID: int64(id)}}
	switch {
	case err == nil:
		return k, lr.write(call, req, &lease.Response{Revision: revision(k.ResponseHeader), ID: int64(k.ID), TTL: k.TTL}, nil)
	case errors.Is(leaseError(err), lease.ErrNotFound):
		// The server answered TTL 0 (etcd's v3rpc LeaseKeepAlive), which
		// clientv3 turns into this error.
		return k, errors.Join(err, lr.write(call, req, &lease.Response{ID: int64(id)}, nil))
	}
	return k, errors.Join(err, lr.write(call, req, nil, err))
}

func (lr *leaseRecorder) KeepAlive(ctx context.Context, id clientv3.LeaseID) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	call := lr.rec.Now()
	in, err := lr.l.KeepAlive(ctx, id)
	if err != nil {
		return in, errors.Join(err, lr.write(call, lease.Request{KeepAlive: &lease.KeepAliveRequest{ID: int64(id)}}, nil, err))
	}
	out := make(chan *clientv3.LeaseKeepAliveResponse)
	go func() {
		defer close(out)
		for k := range in {
			_ = lr.write(call, lease.Request{KeepAlive: &lease.KeepAliveRequest{ID: int64(id)}},
				&lease.Response{Revision: revision(k.ResponseHeader), ID: int64(k.ID), TTL: k.TTL}, nil)
			select {
			case out <- k:
			case <-ctx.Done():
				// clientv3 closes in when ctx ends; drain it.
				for range in {
				}
				return
			}
		}
	}()
	return out, nil
}

func (lr *leaseRecorder) Close() error { return lr.l.Close() }
