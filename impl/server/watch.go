package server

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/watchhub"
)

// watchServer is etcd's Watch service over the store's watch hub.
type watchServer struct {
	pb.UnimplementedWatchServer
	s *Server
}

// Watch serves one bidirectional watch stream, as etcd's serverWatchStream
// does (v3rpc/watch.go): one hub stream per gRPC stream, requests handled
// in order by a receiving goroutine, every response sent by this one.
//
//   - Create: the hub answers with a created response carrying the watch ID
//     (chosen by the client, or the lowest free one for watch_id 0) and the
//     current revision, or — for a negative start revision, a range end at
//     or below the key, or an ID in use — a response both created and
//     canceled with WatchId -1 and etcd's reason (watch.go:270-285,
//     mvcc/watcher.go:115-147). An empty key means "\x00" (watch.go:266).
//     Filters NOPUT and NODELETE are honoured, unknown filters ignored
//     (watch.go FiltersFromRequest).
//   - Cancel: {WatchId, Canceled} once the watch's queued responses are
//     out; a cancel of an unknown ID sends nothing (watch.go:372-394).
//   - Progress request: one response with WatchId -1 and no events, sent
//     when every watch of the stream is synced (the hub's rule; see
//     watchhub.Stream.RequestProgress).
//   - A watch that needs compacted history is cancelled with
//     CompactRevision, header revision 0 and no reason (watch.go:459-466,
//     mvcc/watcher_group.go:255-258).
//   - A watch created with fragment=true has responses larger than
//     MaxRequestBytes+GRPCOverheadBytes split as etcd's sendFragments does.
//
// Like etcd, the stream stays open after the client closes its sending
// side; it ends when the client goes away (ErrGRPCWatchCanceled, as etcd
// answers) or the server stops (ErrGRPCStopped, codes.Unavailable, which
// clients retry).
func (w *watchServer) Watch(gs pb.Watch_WatchServer) error {
	s := w.s
	ctx, cancel := context.WithCancel(gs.Context())
	defer cancel()
	stop := context.AfterFunc(s.quitCtx, cancel)
	defer stop()
	if s.quitCtx.Err() != nil {
		return rpctypes.ErrGRPCStopped
	}
	ws := s.st.NewWatchStream(ctx)
	defer ws.Close()
	sws := &serverWatchStream{s: s, gs: gs, ws: ws, frag: make(map[int64]bool)}
	if a := s.opts.Adversary; a != nil {
		sws.adv = a.newStream(ws, s.st.CompactRevision)
	}
	recvErr := make(chan error, 1)
	go func() {
		err := sws.recvLoop(ctx)
		if err != nil {
			recvErr <- err
			cancel()
		}
	}()
	err := sws.sendLoop(ctx)
	switch {
	case err == errAdversaryReset:
		return err
	case s.quitCtx.Err() != nil:
		return rpctypes.ErrGRPCStopped
	case gs.Context().Err() != nil:
		return rpctypes.ErrGRPCWatchCanceled // watch.go:220-231
	}
	select {
	case rerr := <-recvErr: // the receiving side failed first
		err = rerr
	default:
	}
	return toGRPCError(err)
}

type serverWatchStream struct {
	s  *Server
	gs pb.Watch_WatchServer
	ws *watchhub.Stream

	// The fragment flags of the creations sent to the hub whose created
	// responses the send loop has not seen yet, oldest first: the hub
	// answers creations in the order they were made.
	mu      sync.Mutex
	pending []bool

	frag    map[int64]bool     // send loop only: the watches that asked for fragments
	hdr     *pb.ResponseHeader // send loop only: the last header sent
	scratch []byte             // send loop only: the events of a response of its own

	joinedHdr int64               // send loop only: the greatest header of a joined response sent
	more      []watchhub.Response // send loop only: RecvMore's scratch

	adv  *advStream         // the stream's adversary (Options.Adversary), or nil
	look *watchhub.Response // send loop only: a response the adversary read ahead
}

// recvLoop handles the client's requests in order. It returns nil when the
// client has closed its side, and an error when the stream must end.
func (sws *serverWatchStream) recvLoop(ctx context.Context) error {
	for {
		req, err := sws.gs.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch uv := req.GetRequestUnion().(type) {
		case *pb.WatchRequest_CreateRequest:
			c := uv.CreateRequest
			if c == nil {
				break
			}
			hr := watchhub.Request{
				Key: string(c.Key), RangeEnd: string(c.RangeEnd), StartRevision: c.StartRevision,
				PrevKV: c.PrevKv, ProgressNotify: c.ProgressNotify, WatchID: c.WatchId,
			}
			for _, f := range c.Filters {
				switch f {
				case pb.WatchCreateRequest_NOPUT:
					hr.NoPut = true
				case pb.WatchCreateRequest_NODELETE:
					hr.NoDelete = true
				}
			}
			sws.mu.Lock()
			sws.pending = append(sws.pending, c.Fragment)
			sws.mu.Unlock()
			if _, err := sws.ws.Watch(ctx, hr); err != nil && !rejected(err) {
				return err // the stream is closed: nothing was queued
			}
		case *pb.WatchRequest_CancelRequest:
			if uv.CancelRequest == nil {
				break
			}
			err := sws.ws.Cancel(ctx, uv.CancelRequest.WatchId)
			if err != nil && !errors.Is(err, watchhub.ErrWatchNotFound) {
				return err
			}
		case *pb.WatchRequest_ProgressRequest:
			if uv.ProgressRequest == nil {
				break
			}
			if sws.adv != nil {
				if d, drop := sws.adv.progressRequest(); drop {
					break
				} else if d > 0 {
					time.AfterFunc(d, sws.ws.RequestProgress)
					break
				}
			}
			sws.ws.RequestProgress()
		default:
			// etcd ignores an empty or unknown request (watch.go:401-406).
		}
	}
}

// rejected reports whether Watch's error is a rejection the hub answered on
// the stream.
func rejected(err error) bool {
	for _, e := range []error{watchhub.ErrNegativeStartRevision, watchhub.ErrEmptyRange,
		watchhub.ErrDuplicateWatchID, watchhub.ErrInvalidWatchID} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// sendLoop sends every response of the hub stream, in order, until the
// stream ends or a send fails.
func (sws *serverWatchStream) sendLoop(ctx context.Context) error {
	maxBytes := sws.s.opts.MaxRequestBytes + GRPCOverheadBytes
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if sws.adv != nil {
			if err := sws.sendAdversarial(ctx, maxBytes); err != nil {
				return err
			}
			continue
		}
		r, err := sws.ws.Recv(ctx)
		if err != nil {
			return err
		}
		if err := sws.sendJoined(r, maxBytes); err != nil {
			return err
		}
	}
}

// Bounds of a response joined at send time (sendJoined): etcd's bound on
// the revisions of one catch-up response (watchBatchMaxRevs, here on its
// events), and on its memory, a quarter of the hub's default stream bound.
const (
	joinMaxEvents = 1000
	joinMaxBytes  = 1 << 20
)

// sendJoined sends r, a response just received from the hub stream, with
// the responses of the same watch queued behind it (watchhub.Stream.RecvMore)
// as one: when the sender falls behind its stream's queue, each watch
// gets fewer, larger responses — etcd's shape for a watch that fell behind
// (docs/SPEC.md §3.13) — without waiting for anything, so no response
// leaves later than it would have. A joined response carries the header of
// its last part; every later response with events on the stream carries at
// least that header, so headers never decrease (§3.12).
func (sws *serverWatchStream) sendJoined(r watchhub.Response, maxBytes int) error {
	if len(r.Events) == 0 || r.Created || r.Canceled {
		return sws.sendOne(r, maxBytes)
	}
	r.Revision = max(r.Revision, sws.joinedHdr)
	more := sws.ws.RecvMore(r, sws.more[:0], joinMaxEvents, joinMaxBytes)
	sws.more = more[:0]
	if len(more) == 0 {
		return sws.sendOne(r, maxBytes)
	}
	last := more[len(more)-1].Revision
	sws.joinedHdr = max(sws.joinedHdr, last)
	if sws.frag[r.WatchID] {
		// Fragments are cut from the events themselves (sendFragments).
		for _, m := range more {
			r = r.Join(m)
		}
		r.Revision = max(r.Revision, last)
		clear(more)
		return sws.sendOne(r, maxBytes)
	}
	buf := encodeEvents(&r, sws.scratch[:0])
	if b, _ := r.Shared(); b != nil {
		buf = append(sws.scratch[:0], buf...)
	}
	for i := range more {
		if b, at := more[i].Shared(); b != nil {
			buf = append(buf, b.Memo(newWireEvents).(*wireEvents).span(b, at, at+len(more[i].Events))...)
		} else {
			for j := range more[i].Events {
				buf = appendEventField(buf, &more[i].Events[j])
			}
		}
	}
	clear(more)
	r.Revision = max(r.Revision, last)
	err := sws.sendEncoded(&r, buf)
	if cap(buf) <= 64<<10 {
		sws.scratch = buf
	}
	return err
}

// sendOne sends one response of the hub stream.
func (sws *serverWatchStream) sendOne(r watchhub.Response, maxBytes int) (err error) {
	fragment := false
	switch {
	case r.Created:
		sws.mu.Lock()
		if len(sws.pending) > 0 {
			fragment = sws.pending[0]
			sws.pending = sws.pending[1:]
		}
		sws.mu.Unlock()
		if !r.Canceled && fragment {
			sws.frag[r.WatchID] = true
		}
		fragment = false
	case r.Canceled:
		delete(sws.frag, r.WatchID)
	case len(r.Events) > 1:
		fragment = sws.frag[r.WatchID]
	}
	if fragment {
		return sendFragments(sws.toPB(r), maxBytes, sws.gs.Send)
	}
	return sws.send(&r)
}

// sendAdversarial sends the next response of the hub stream as the
// stream's adversary chooses (Options.Adversary): after a pause, joined
// with the responses of the same watch queued right behind it, split at
// revision boundaries, or not at all (a periodic progress notification);
// and it may end the stream afterwards (errAdversaryReset).
func (sws *serverWatchStream) sendAdversarial(ctx context.Context, maxBytes int) error {
	adv := sws.adv
	var r watchhub.Response
	if sws.look != nil {
		r, sws.look = *sws.look, nil
	} else {
		if d := adv.stall(); d > 0 {
			if err := sleep(ctx, d); err != nil {
				return err
			}
		}
		var err error
		if r, err = sws.ws.Recv(ctx); err != nil {
			return err
		}
	}
	switch {
	case r.IsProgressNotify() && r.WatchID != watchhub.InvalidWatchID:
		if adv.dropProgress(&r) {
			return nil
		}
	case r.CompactRevision != 0:
		adv.a.record(ChoiceCompactedCancel, adv.id, r.WatchID, r.Revision, "the watch is cancelled with CompactRevision %d", r.CompactRevision)
	case len(r.Events) > 0 && !r.Created && !r.Canceled:
		joined := 0
		for adv.join() {
			next, err := sws.ws.Recv(pollCtx)
			if err != nil {
				break // nothing queued behind it
			}
			if next.WatchID != r.WatchID || len(next.Events) == 0 || next.Created || next.Canceled {
				sws.look = &next
				break
			}
			r = r.Join(next)
			joined++
		}
		if joined > 0 {
			adv.a.record(ChoiceJoin, adv.id, r.WatchID, r.Revision, "%d responses sent as one of %d events, revisions %d..%d",
				joined+1, len(r.Events), r.Events[0].KV.ModRevision, r.Events[len(r.Events)-1].KV.ModRevision)
		}
		if cuts := adv.split(&r); cuts != nil {
			rest, at := r, 0
			for _, c := range cuts {
				var piece watchhub.Response
				piece, rest = rest.SplitAt(c - at)
				at = c
				if err := sws.sendAdversarialOne(piece, maxBytes); err != nil {
					return err
				}
			}
			r = rest
		}
	}
	if err := sws.sendAdversarialOne(r, maxBytes); err != nil {
		return err
	}
	switch adv.reset() {
	case streamReset:
		return errAdversaryReset
	case connReset:
		sws.s.closeConnOf(sws.gs.Context())
		return errAdversaryReset
	}
	return nil
}

// sendAdversarialOne sends one response as sendOne does, or, to a watch
// that asked for fragments, as fragments cut where the adversary chooses
// (ChoiceFragment). The fragments go out one after the other, nothing
// between them: clientv3 3.7.3 joins a fragment only with the next
// response of the same watch (serveWatchClient's cur), as etcd's
// sendFragments sends them.
func (sws *serverWatchStream) sendAdversarialOne(r watchhub.Response, maxBytes int) error {
	if r.Created || r.Canceled || len(r.Events) < 2 || !sws.frag[r.WatchID] {
		return sws.sendOne(r, maxBytes)
	}
	cuts := sws.adv.fragment(&r)
	if cuts == nil {
		return sws.sendOne(r, maxBytes)
	}
	wr := sws.toPB(r)
	at := 0
	for i := 0; i <= len(cuts); i++ {
		end := len(wr.Events)
		if i < len(cuts) {
			end = cuts[i]
		}
		piece := &pb.WatchResponse{Header: wr.Header, WatchId: wr.WatchId, Events: wr.Events[at:end], Fragment: i < len(cuts)}
		if err := sws.gs.Send(piece); err != nil {
			return err
		}
		at = end
	}
	return nil
}

// pollCtx is a finished context: Recv with it polls.
var pollCtx = func() context.Context {
	c, cancel := context.WithCancel(context.Background())
	cancel()
	return c
}()

// send sends a response whose events are encoded once for every stream
// that sends them (see wire.go): the WatchResponse carries them as its
// unknown fields, which marshal as field 11 after the others — the bytes
// etcd would send.
func (sws *serverWatchStream) send(r *watchhub.Response) error {
	if sws.hdr == nil || sws.hdr.Revision != r.Revision {
		sws.hdr = sws.s.header(r.Revision)
	}
	wr := &pb.WatchResponse{
		Header:          sws.hdr,
		WatchId:         r.WatchID,
		Created:         r.Created,
		Canceled:        r.Canceled,
		CompactRevision: r.CompactRevision,
		CancelReason:    r.CancelReason,
	}
	if len(r.Events) > 0 {
		evs := encodeEvents(r, sws.scratch[:0])
		wr.ProtoReflect().SetUnknown(evs)
		err := sws.gs.Send(wr)
		if b, _ := r.Shared(); b == nil && cap(evs) <= 64<<10 {
			sws.scratch = evs // keep a small buffer for the next one
		}
		return err
	}
	return sws.gs.Send(wr)
}

// sendEncoded sends a response with events whose wire encoding is evs.
func (sws *serverWatchStream) sendEncoded(r *watchhub.Response, evs []byte) error {
	if sws.hdr == nil || sws.hdr.Revision != r.Revision {
		sws.hdr = sws.s.header(r.Revision)
	}
	wr := &pb.WatchResponse{Header: sws.hdr, WatchId: r.WatchID}
	wr.ProtoReflect().SetUnknown(evs)
	return sws.gs.Send(wr)
}

// toPB converts a response to etcd's message with its events decoded, for
// sendFragments (which splits them).
func (sws *serverWatchStream) toPB(r watchhub.Response) *pb.WatchResponse {
	wr := &pb.WatchResponse{
		Header:          sws.s.header(r.Revision),
		WatchId:         r.WatchID,
		Created:         r.Created,
		Canceled:        r.Canceled,
		CompactRevision: r.CompactRevision,
		CancelReason:    r.CancelReason,
	}
	if len(r.Events) > 0 {
		wr.Events = make([]*mvccpb.Event, len(r.Events))
		for i := range r.Events {
			wr.Events[i] = toPBEvent(&r.Events[i])
		}
	}
	return wr
}

func toPBEvent(e *mvcc.Event) *mvccpb.Event {
	pe := &mvccpb.Event{Kv: toPBKV(&e.KV), PrevKv: toPBKV(e.PrevKV)}
	if e.Type == mvcc.Delete {
		pe.Type = mvccpb.DELETE
	}
	return pe
}

// sendFragments is etcd's (v3rpc/watch.go:581-635): a response of at least
// maxBytes with two or more events is sent as several, each but the last
// with Fragment set, each as large as fits below maxBytes (but with at
// least one event). clientv3 joins them again.
func sendFragments(wr *pb.WatchResponse, maxBytes int, send func(*pb.WatchResponse) error) error {
	if proto.Size(wr) < maxBytes || len(wr.Events) < 2 {
		return send(wr)
	}
	idx := 0
	for {
		cur := &pb.WatchResponse{
			Header:          wr.Header,
			WatchId:         wr.WatchId,
			Created:         wr.Created,
			Canceled:        wr.Canceled,
			CompactRevision: wr.CompactRevision,
			CancelReason:    wr.CancelReason,
			Fragment:        true,
			Events:          make([]*mvccpb.Event, 0),
		}
		for _, ev := range wr.Events[idx:] {
			cur.Events = append(cur.Events, ev)
			if len(cur.Events) > 1 && proto.Size(cur) >= maxBytes {
				cur.Events = cur.Events[:len(cur.Events)-1]
				break
			}
			idx++
		}
		if idx == len(wr.Events) {
			cur.Fragment = false
		}
		if err := send(cur); err != nil {
			return err
		}
		if !cur.Fragment {
			return nil
		}
	}
}
