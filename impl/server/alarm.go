package server

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/watchspec/watchspec/impl/store"
)

// Alarms, as etcd keeps them (server/etcdserver/api/v3alarm/alarms.go): a
// set of (member ID, alarm type), any type but NONE, raised by the member
// itself or by Maintenance.Alarm ACTIVATE and cleared by DEACTIVATE. The
// member's own NOSPACE is the store's alarm (store.Store.Alarms): the store
// raises it when a write runs out of disk space and refuses puts while it
// is raised. The others are the server's: in memory, like the store's, so
// a restart clears every alarm (etcd keeps them in its backend).
//
// While any NOSPACE is raised, puts and transactions with a put in either
// branch are refused with ErrGRPCNoSpace (etcd's applierV3Capped,
// etcdserver/apply/capped.go); while any CORRUPT is raised, every write —
// put, delete, writing transaction, compaction — is refused with
// ErrGRPCCorrupt (applierV3Corrupt, apply/corrupt.go). Reads go on, as in
// etcd, where they do not go through the applier. Other types are only
// listed.
type alarmSet struct {
	mu    sync.Mutex
	extra map[alarmKey]struct{} // every alarm but the member's own NOSPACE
	// How many of extra are NOSPACE and CORRUPT: read on every write
	// without the lock.
	noSpace, corrupt atomic.Int32
}

// count returns the counter of alarms of type typ in extra, if it has one.
func (a *alarmSet) count(typ pb.AlarmType) *atomic.Int32 {
	switch typ {
	case pb.AlarmType_NOSPACE:
		return &a.noSpace
	case pb.AlarmType_CORRUPT:
		return &a.corrupt
	}
	return nil
}

type alarmKey struct {
	member uint64
	typ    pb.AlarmType
}

// Alarms returns the alarms raised, as Maintenance.Alarm GET lists them:
// the member's own NOSPACE first, then the others by type and member.
func (s *Server) Alarms() []*pb.AlarmMember {
	return s.alarmList(pb.AlarmType_NONE)
}

// alarmList lists the alarms of type typ (NONE: all).
func (s *Server) alarmList(typ pb.AlarmType) []*pb.AlarmMember {
	var out []*pb.AlarmMember
	if (typ == pb.AlarmType_NONE || typ == pb.AlarmType_NOSPACE) && s.storeNoSpace() {
		out = append(out, &pb.AlarmMember{MemberID: s.opts.MemberID, Alarm: pb.AlarmType_NOSPACE})
	}
	s.alarms.mu.Lock()
	var keys []alarmKey
	for k := range s.alarms.extra {
		if typ == pb.AlarmType_NONE || k.typ == typ {
			keys = append(keys, k)
		}
	}
	s.alarms.mu.Unlock()
	slices.SortFunc(keys, func(a, b alarmKey) int {
		return cmp.Or(cmp.Compare(a.typ, b.typ), cmp.Compare(a.member, b.member))
	})
	for _, k := range keys {
		out = append(out, &pb.AlarmMember{MemberID: k.member, Alarm: k.typ})
	}
	return out
}

func (s *Server) storeNoSpace() bool {
	for _, a := range s.st.Alarms() {
		if a == store.AlarmNoSpace {
			return true
		}
	}
	return false
}

// raised reports whether an alarm of type typ is raised for any member.
func (s *Server) raised(typ pb.AlarmType) bool {
	if typ == pb.AlarmType_NOSPACE && s.storeNoSpace() {
		return true
	}
	if c := s.alarms.count(typ); c != nil {
		return c.Load() > 0
	}
	s.alarms.mu.Lock()
	defer s.alarms.mu.Unlock()
	for k := range s.alarms.extra {
		if k.typ == typ {
			return true
		}
	}
	return false
}

// activate raises an alarm and returns it (also when it was raised
// already, as etcd's AlarmStore.Activate does).
func (s *Server) activate(member uint64, typ pb.AlarmType) *pb.AlarmMember {
	if member == s.opts.MemberID && typ == pb.AlarmType_NOSPACE {
		s.st.RaiseAlarm(store.AlarmNoSpace) // only unknown alarms fail
	} else {
		s.alarms.mu.Lock()
		if s.alarms.extra == nil {
			s.alarms.extra = make(map[alarmKey]struct{})
		}
		k := alarmKey{member, typ}
		if _, ok := s.alarms.extra[k]; !ok {
			s.alarms.extra[k] = struct{}{}
			if c := s.alarms.count(typ); c != nil {
				c.Add(1)
			}
		}
		s.alarms.mu.Unlock()
	}
	return &pb.AlarmMember{MemberID: member, Alarm: typ}
}

// deactivate clears an alarm and returns it, or nil if it was not raised.
func (s *Server) deactivate(member uint64, typ pb.AlarmType) *pb.AlarmMember {
	if member == s.opts.MemberID && typ == pb.AlarmType_NOSPACE {
		if !s.st.DisarmAlarm(store.AlarmNoSpace) {
			return nil
		}
		return &pb.AlarmMember{MemberID: member, Alarm: typ}
	}
	s.alarms.mu.Lock()
	defer s.alarms.mu.Unlock()
	k := alarmKey{member, typ}
	if _, ok := s.alarms.extra[k]; !ok {
		return nil
	}
	delete(s.alarms.extra, k)
	if c := s.alarms.count(typ); c != nil {
		c.Add(-1)
	}
	return &pb.AlarmMember{MemberID: member, Alarm: typ}
}

// refuseWrite returns the error etcd's appliers give a write while an alarm
// is raised: ErrGRPCCorrupt for any write under CORRUPT (checked first, as
// etcd's corrupt applier wraps the capped one), ErrGRPCNoSpace for a write
// that puts under NOSPACE. puts says whether the request puts (a Put, or a
// Txn with a put in either branch at any depth: etcd's quota cost > 0).
func (s *Server) refuseWrite(kind string, puts bool) error {
	var err error
	switch {
	case s.raised(pb.AlarmType_CORRUPT):
		err = rpctypes.ErrGRPCCorrupt
	case puts && s.raised(pb.AlarmType_NOSPACE):
		err = rpctypes.ErrGRPCNoSpace
	default:
		return nil
	}
	s.log.Debug("write refused: an alarm is raised", "request", kind, "err", rpctypes.ErrorDesc(err))
	return err
}

// txnPuts reports whether a transaction puts in either branch, at any
// depth (etcd's storage/quota.go costTxn > 0).
func txnPuts(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.GetSuccess(), r.GetFailure()} {
		for _, u := range ops {
			if u.GetRequestPut() != nil {
				return true
			}
			if t := u.GetRequestTxn(); t != nil && txnPuts(t) {
				return true
			}
		}
	}
	return false
}

// Alarm is etcd's Maintenance.Alarm (v3rpc/maintenance.go:249-259 and
// etcdserver/apply/backend.go:109-136 applierV3backend.Alarm):
//
//   - GET lists the alarms of the type asked for (NONE: all), whatever the
//     member ID;
//   - ACTIVATE raises the alarm for the member given and answers it (an
//     alarm of type NONE is ignored); any type is accepted, as in etcd;
//   - DEACTIVATE clears it and answers it, or answers nothing if it was
//     not raised. Disarming this member's NOSPACE lets puts through again
//     (the store retries the checkpoint and compaction that ran out of
//     space); if the disk is still full, the next put raises it again.
//
// An unknown action is InvalidArgument (etcd 3.7.3 dereferences a nil
// response there and the process dies).
func (m *maintenanceServer) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	s := m.s
	if s.quitCtx.Err() != nil {
		return nil, rpctypes.ErrGRPCStopped
	}
	resp := &pb.AlarmResponse{}
	switch r.GetAction() {
	case pb.AlarmRequest_GET:
		resp.Alarms = s.alarmList(r.GetAlarm())
	case pb.AlarmRequest_ACTIVATE:
		if r.GetAlarm() == pb.AlarmType_NONE {
			break
		}
		a := s.activate(r.GetMemberID(), r.GetAlarm())
		resp.Alarms = append(resp.Alarms, a)
		s.log.Warn("alarm activated", "alarm", r.GetAlarm().String(), "member", memberHex(r.GetMemberID()))
	case pb.AlarmRequest_DEACTIVATE:
		if a := s.deactivate(r.GetMemberID(), r.GetAlarm()); a != nil {
			resp.Alarms = append(resp.Alarms, a)
			s.log.Info("alarm deactivated", "alarm", r.GetAlarm().String(), "member", memberHex(r.GetMemberID()))
		}
	default:
		return nil, status.Errorf(codes.InvalidArgument, "etcdserver: unknown alarm action %d (GET 0, ACTIVATE 1, DEACTIVATE 2)", int32(r.GetAction()))
	}
	resp.Header = s.header(s.st.Revision())
	return resp, nil
}

// memberHex formats a member ID as etcd does (types.ID.String).
func memberHex(id uint64) string { return fmt.Sprintf("%x", id) }
