package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// maintenanceServer serves Status; every other Maintenance RPC is
// codes.Unimplemented.
type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer
	s *Server
}

// Status describes the member as etcd's does (v3rpc/maintenance.go:261-296
// Status): it is its own leader, its raft index is the store's revision (a
// plausible, monotonic stand-in: there is no raft log), and the database
// size is that of the store's data file when the data directory is known.
func (m *maintenanceServer) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	s := m.s
	rev := s.st.Revision()
	size := s.dbSize()
	return &pb.StatusResponse{
		Header:           s.header(rev),
		Version:          s.opts.Version,
		DbSize:           size,
		DbSizeInUse:      size,
		Leader:           s.opts.MemberID,
		RaftIndex:        uint64(rev),
		RaftTerm:         s.opts.RaftTerm,
		RaftAppliedIndex: uint64(rev),
		DbSizeQuota:      dbQuotaBytes,
		DowngradeInfo:    &pb.DowngradeInfo{},
	}, nil
}

// clusterServer serves MemberList; membership changes are
// codes.Unimplemented.
type clusterServer struct {
	pb.UnimplementedClusterServer
	s *Server
}

// MemberList lists the one member. As in etcd (v3rpc/member.go:104-112,
// ClusterServer.header), the header carries no revision.
func (c *clusterServer) MemberList(ctx context.Context, _ *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	s := c.s
	h := s.header(0)
	return &pb.MemberListResponse{
		Header: h,
		Members: []*pb.Member{{
			ID:         s.opts.MemberID,
			Name:       s.opts.Name,
			ClientURLs: s.clientURLs(),
		}},
	}, nil
}
