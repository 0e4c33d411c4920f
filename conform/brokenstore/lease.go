package brokenstore

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
)

// leaseProxy forwards etcd's Lease service to the backend, through the
// mutant's lease hooks.
type leaseProxy struct {
	pb.UnimplementedLeaseServer
	backend pb.LeaseClient
	kv      pb.KVClient
	m       *Mutant
}

func (p *leaseProxy) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	resp, err := p.backend.LeaseGrant(ctx, r)
	if err == nil && resp.Error == "" && p.m.Granted != nil {
		p.m.Granted(p.backend, p.kv, resp)
	}
	return resp, err
}

func (p *leaseProxy) gone(id int64) bool { return p.m.Gone != nil && p.m.Gone(id) }

func (p *leaseProxy) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	if p.gone(r.ID) {
		return nil, rpctypes.ErrGRPCLeaseNotFound
	}
	if p.m.Revoke != nil {
		p.m.Revoke(ctx, p.backend, p.kv, r)
	}
	return p.backend.LeaseRevoke(ctx, r)
}

func (p *leaseProxy) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	resp, err := p.backend.LeaseTimeToLive(ctx, r)
	if err == nil && p.gone(r.ID) {
		// etcd's answer for a lease it does not know (v3rpc/lease.go).
		resp = &pb.LeaseTimeToLiveResponse{Header: resp.Header, ID: r.ID, TTL: -1}
	}
	return resp, err
}

func (p *leaseProxy) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	resp, err := p.backend.LeaseLeases(ctx, r)
	if err == nil {
		resp.Leases = slices.DeleteFunc(resp.Leases, func(l *pb.LeaseStatus) bool { return p.gone(l.ID) })
	}
	return resp, err
}

// LeaseKeepAlive forwards a keep-alive stream both ways, but answers for a
// lease the mutant says is gone itself.
func (p *leaseProxy) LeaseKeepAlive(client pb.Lease_LeaseKeepAliveServer) error {
	ctx, cancel := context.WithCancel(client.Context())
	defer cancel()
	backend, err := p.backend.LeaseKeepAlive(ctx)
	if err != nil {
		return err
	}
	var mu sync.Mutex // serialises sends to the client
	go func() {
		defer cancel()
		for {
			req, err := client.Recv()
			if errors.Is(err, io.EOF) {
				backend.CloseSend()
				return
			}
			if err != nil {
				return
			}
			if p.gone(req.ID) {
				// etcd answers TTL 0 for a lease it does not know.
				mu.Lock()
				err = client.Send(&pb.LeaseKeepAliveResponse{Header: &pb.ResponseHeader{}, ID: req.ID})
				mu.Unlock()
			} else {
				err = backend.Send(req)
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		resp, err := backend.Recv()
		if err != nil {
			return err
		}
		mu.Lock()
		err = client.Send(resp)
		mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// Restarted tells the proxy that its backend was restarted (on its data
// directory); the mutant's Restarted hook, if any, then acts. Call it from
// the restart function of a conformance run.
func (p *Proxy) Restarted(ctx context.Context) error {
	if p.m.Restarted == nil {
		return nil
	}
	// The backend has just come back: wait for the connection.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return p.m.Restarted(ctx, waitingLease{pb.NewLeaseClient(p.conn)})
}

// waitingLease waits for the connection to the backend to be ready before
// each call.
type waitingLease struct{ pb.LeaseClient }

func (w waitingLease) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest, opts ...grpc.CallOption) (*pb.LeaseLeasesResponse, error) {
	return w.LeaseClient.LeaseLeases(ctx, r, append(opts, grpc.WaitForReady(true))...)
}

func (w waitingLease) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest, opts ...grpc.CallOption) (*pb.LeaseTimeToLiveResponse, error) {
	return w.LeaseClient.LeaseTimeToLive(ctx, r, append(opts, grpc.WaitForReady(true))...)
}

func (w waitingLease) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest, opts ...grpc.CallOption) (*pb.LeaseRevokeResponse, error) {
	return w.LeaseClient.LeaseRevoke(ctx, r, append(opts, grpc.WaitForReady(true))...)
}

// attachedKeys returns how many keys are attached to lease id on the
// backend (0 when it is gone or the backend fails).
func attachedKeys(ctx context.Context, backend pb.LeaseClient, id int64) int {
	t, err := backend.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: id, Keys: true})
	if err != nil || t.TTL <= 0 {
		return 0
	}
	return len(t.Keys)
}

// EarlyExpiry expires a lease before its TTL: from 0.3 s after the grant
// until 0.7·TTL, it looks every 100 ms whether keys are attached to the
// lease, and at the first sight of one revokes the lease on the backend,
// which deletes its keys — no client revoked it, and the grant said it
// would live at least TTL seconds from the grant's call. SPEC §2.11
// LeaseExpiry.
//
// Only leases with keys attached in that window are opportunities: the
// expiry of a lease without keys deletes nothing a watch could see.
func EarlyExpiry(st *Strikes) *Mutant {
	return &Mutant{Granted: func(backend pb.LeaseClient, _ pb.KVClient, g *pb.LeaseGrantResponse) {
		go func() {
			until := time.Now().Add(time.Duration(g.TTL) * 700 * time.Millisecond)
			time.Sleep(300 * time.Millisecond)
			for ; time.Now().Before(until); time.Sleep(100 * time.Millisecond) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				n := attachedKeys(ctx, backend, g.ID)
				if n > 0 && st.Take() {
					if _, err := backend.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: g.ID}); err == nil {
						st.Applied.Add(1)
					}
				}
				cancel()
				if n > 0 {
					return
				}
			}
		}()
	}}
}

// SplitLeaseDeletion deletes the keys of a revoked lease at two revisions:
// when a client revokes a lease with two or more keys attached, the proxy
// first deletes the first of them on its own, then forwards the revoke,
// which deletes the rest. SPEC §3.15 LeaseAtomic.
func SplitLeaseDeletion(st *Strikes) *Mutant {
	return &Mutant{Revoke: func(ctx context.Context, backend pb.LeaseClient, kv pb.KVClient, r *pb.LeaseRevokeRequest) {
		t, err := backend.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: r.ID, Keys: true})
		if err != nil || t.TTL <= 0 || len(t.Keys) < 2 || !st.Take() {
			return
		}
		if _, err := kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: t.Keys[0]}); err == nil {
			st.Applied.Add(1)
		}
	}}
}

// ForgetLeases loses the server's leases when it restarts ([Proxy.Restarted]):
// it revokes every lease the backend holds, deleting their keys at once,
// as a server that does not persist its leases would find their keys
// orphaned and delete them. etcd keeps its leases across a restart and
// counts their TTLs again (SPEC §2.9), so the keys of a lease that a
// grant or keep-alive promised a longer life go early. SPEC §2.11
// LeaseExpiry.
//
// Each lease with keys attached at a restart is an opportunity.
func ForgetLeases(st *Strikes) *Mutant {
	var mu sync.Mutex
	return &Mutant{Restarted: func(ctx context.Context, backend pb.LeaseClient) error {
		mu.Lock()
		defer mu.Unlock()
		ls, err := backend.LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
		if err != nil {
			return err
		}
		for _, l := range ls.Leases {
			if attachedKeys(ctx, backend, l.ID) == 0 || !st.Take() {
				continue
			}
			if _, err := backend.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: l.ID}); err == nil {
				st.Applied.Add(1)
			}
		}
		return nil
	}}
}

// ForgetLeasesKeepKeys loses the server's leases when it restarts
// ([Proxy.Restarted]) but keeps their keys, as a server that does not
// persist its leases would: from then on it answers for every lease that
// was live as for one that does not exist — a keep-alive with TTL 0, a
// time-to-live with TTL -1, a revoke with "requested lease not found" —
// while etcd keeps its leases and counts their TTLs again (SPEC §2.9). The
// lease is seen gone before the TTL a grant or keep-alive promised. SPEC
// §2.11 LeaseExpiry.
//
// Each lease live at a restart is an opportunity; each answer it fakes is
// counted as applied. (Puts naming a forgotten lease still reach the
// backend, which knows it; so do its expiry and its keys.)
func ForgetLeasesKeepKeys(st *Strikes) *Mutant {
	var mu sync.Mutex
	forgotten := map[int64]bool{}
	return &Mutant{
		Restarted: func(ctx context.Context, backend pb.LeaseClient) error {
			ls, err := backend.LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			for _, l := range ls.Leases {
				if !forgotten[l.ID] && st.Take() {
					forgotten[l.ID] = true
				}
			}
			return nil
		},
		Gone: func(id int64) bool {
			mu.Lock()
			defer mu.Unlock()
			if forgotten[id] {
				st.Applied.Add(1)
			}
			return forgotten[id]
		},
	}
}
