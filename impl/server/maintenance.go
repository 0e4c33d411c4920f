package server

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// maintenanceServer serves Status and Alarm (alarm.go); every other
// Maintenance RPC is codes.Unimplemented.
type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer
	s *Server
}

// Status describes the member as etcd's does (v3rpc/maintenance.go:261-296
// Status): it is its own leader, its raft index is the store's revision (a
// plausible, monotonic stand-in: there is no raft log), the database sizes
// are the store's data file's (store.Stats), the storage version is the
// cluster version etcd settles on (major.minor.0 of Options.Version), and
// the errors are the alarms raised, each as etcd writes it, so that
// `etcdctl endpoint status` shows them in its errors column.
func (m *maintenanceServer) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	s := m.s
	st := s.st.Stats()
	resp := &pb.StatusResponse{
		Header:           s.header(st.Revision),
		Version:          s.opts.Version,
		DbSize:           st.DBSize,
		DbSizeInUse:      st.DBSizeInUse,
		Leader:           s.opts.MemberID,
		RaftIndex:        uint64(st.Revision),
		RaftTerm:         s.opts.RaftTerm,
		RaftAppliedIndex: uint64(st.Revision),
		DbSizeQuota:      dbQuotaBytes,
		StorageVersion:   clusterVersion(s.opts.Version),
		DowngradeInfo:    &pb.DowngradeInfo{},
	}
	for _, a := range s.Alarms() {
		resp.Errors = append(resp.Errors, alarmString(a))
	}
	return resp, nil
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

// alarmString is an alarm as etcd writes it in Status's errors
// (AlarmMember.String(), protobuf's text format: "memberID:N alarm:NAME").
// protobuf-go puts one or two spaces between the fields, at random per
// binary (so that nobody parses it); this is the one-space form, so that
// the text does not change from build to build.
func alarmString(a *pb.AlarmMember) string {
	return fmt.Sprintf("memberID:%d alarm:%s", a.MemberID, a.Alarm)
}
