package server

import (
	"context"
	"errors"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/watchspec/watchspec/impl/store"
)

// leaseServer is etcd's Lease service (SPEC §2.9 Lease operations)
// on the store's leases (impl/store/lease.go): answers, errors and
// their order are etcd v3.7's (v3rpc/lease.go, etcdserver/v3_server.go,
// apply/apply.go). The one difference: LeaseLeases lists the leases by ID,
// etcd by expiry (lessor.go Leases).
type leaseServer struct {
	pb.UnimplementedLeaseServer
	s *Server
}

func (s *Server) leaseExists(id int64) bool {
	_, err := s.st.LeaseTimeToLive(id, false)
	return err == nil
}

// LeaseGrant grants a lease; ID 0 lets the server choose one (etcd's
// v3_server.go LeaseGrant). A TTL below the store's minimum is raised to
// it; one above MaxLeaseTTL fails with ErrGRPCLeaseTTLTooLarge, a taken ID
// with ErrGRPCLeaseExist. Under the NOSPACE alarm a grant is refused
// (etcd's applierV3Capped.LeaseGrant).
func (l *leaseServer) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	s := l.s
	if err := s.refuseWrite("LeaseGrant", true); err != nil {
		return nil, err
	}
	ls, err := s.st.LeaseGrant(ctx, r.ID, r.TTL)
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.LeaseGrantResponse{Header: s.header(s.st.Revision()), ID: ls.ID, TTL: ls.TTL}, nil
}

// LeaseRevoke revokes a lease: its keys are deleted at one revision, which
// the header carries. An unknown lease fails with ErrGRPCLeaseNotFound.
func (l *leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	s := l.s
	if err := s.refuseWrite("LeaseRevoke", false); err != nil {
		return nil, err
	}
	rev, err := s.st.LeaseRevoke(ctx, r.ID)
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.LeaseRevokeResponse{Header: s.header(rev)}, nil
}

// LeaseTimeToLive answers a lease's remaining and granted TTL and, with
// Keys, its keys; an unknown lease is TTL -1, not an error (etcd's
// v3rpc/lease.go LeaseTimeToLive).
func (l *leaseServer) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	s := l.s
	st, err := s.st.LeaseTimeToLive(r.ID, r.Keys)
	if errors.Is(err, store.ErrLeaseNotFound) {
		return &pb.LeaseTimeToLiveResponse{Header: s.header(s.st.Revision()), ID: r.ID, TTL: -1}, nil
	}
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp := &pb.LeaseTimeToLiveResponse{Header: s.header(s.st.Revision()), ID: r.ID, TTL: st.TTL, GrantedTTL: st.GrantedTTL}
	if r.Keys {
		resp.Keys = make([][]byte, len(st.Keys))
		for i, k := range st.Keys {
			resp.Keys[i] = []byte(k)
		}
	}
	return resp, nil
}

// LeaseLeases lists the leases.
func (l *leaseServer) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	s := l.s
	ls := s.st.Leases()
	out := &pb.LeaseLeasesResponse{Header: s.header(s.st.Revision()), Leases: make([]*pb.LeaseStatus, len(ls))}
	for i, x := range ls {
		out.Leases[i] = &pb.LeaseStatus{ID: x.ID}
	}
	return out, nil
}

// LeaseKeepAlive renews leases, one response per request, in order. The
// header is taken before the renewal, as etcd's is, so that a keep-alive is
// never answered at a revision after the lease's revoke; a lease that does
// not exist or has expired is answered with TTL 0 (v3rpc/lease.go
// leaseKeepAlive).
func (l *leaseServer) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	s := l.s
	ctx := stream.Context()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp := &pb.LeaseKeepAliveResponse{ID: req.ID, Header: s.header(s.st.Revision())}
		ttl, err := s.st.LeaseKeepAlive(ctx, req.ID)
		switch {
		case errors.Is(err, store.ErrLeaseNotFound):
			ttl = 0
		case err != nil:
			return toGRPCError(err)
		}
		resp.TTL = ttl
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}
