package server

import (
	"context"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
	"github.com/watchspec/watchspec/impl/watchhub"
)

// sentStream records what a watch stream's send loop sends, decoded as the
// client would.
type sentStream struct {
	grpc.ServerStream
	sent []*pb.WatchResponse
}

func (f *sentStream) Send(wr *pb.WatchResponse) error {
	b, err := proto.Marshal(wr)
	if err != nil {
		return err
	}
	var got pb.WatchResponse
	if err := proto.Unmarshal(b, &got); err != nil {
		return err
	}
	f.sent = append(f.sent, &got)
	return nil
}

func (f *sentStream) Recv() (*pb.WatchRequest, error) { select {} }

// summary is one sent response: watch, header, revisions of its events,
// and P for a progress notification.
func summary(wr *pb.WatchResponse) string {
	s := fmt.Sprintf("w%d@%d", wr.WatchId, wr.Header.GetRevision())
	if len(wr.Events) == 0 {
		return s + " P"
	}
	for _, e := range wr.Events {
		s += fmt.Sprintf(" %d", e.Kv.ModRevision)
	}
	if wr.Fragment {
		s += " F"
	}
	return s
}

// The send loop joins the responses of a watch queued behind the one it
// sends into one (docs/SPEC.md §3.13, sendJoined): each watch still gets
// its events in order and once (§3.1, §3.2), headers never decrease on
// the stream and are not below the events (§3.12) — a watch whose older
// response was overtaken by another watch's joined one gets the joined
// header — a progress notification is never overtaken by later events
// (§3.6), and a watch that asked for fragments gets its joined response in
// fragments (etcd's sendFragments).
func TestSendLoopJoinsQueuedResponsesOfAWatch(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(t.TempDir(), store.Options{KV: mvcc.Options{UnsafeNoFsync: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := New(st, testOptions())
	put := func(key string) {
		t.Helper()
		if _, err := st.Put(ctx, store.PutRequest{Key: key, Value: "v"}); err != nil {
			t.Fatal(err)
		}
	}
	// Responses are queued while nobody reads; then the loop sends them.
	run := func(t *testing.T, fragment bool, queue func(ws *watchhub.Stream)) []string {
		ws := st.NewWatchStream(ctx)
		defer ws.Close()
		gs := &sentStream{}
		sws := &serverWatchStream{s: srv, gs: gs, ws: ws, frag: map[int64]bool{}}
		for _, w := range []watchhub.Request{{Key: "k", RangeEnd: "l", WatchID: 1}, {Key: "k2", WatchID: 2}} {
			sws.pending = append(sws.pending, fragment && w.WatchID == 1)
			if _, err := ws.Watch(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
		queue(ws)
		// A fragment limit of 1 byte: a fragment watch's responses of
		// two events or more are sent in fragments of one.
		done, cancel := context.WithCancel(ctx)
		cancel()
		for {
			r, err := ws.Recv(done)
			if err != nil {
				break
			}
			if err := sws.sendJoined(r, 1); err != nil {
				t.Fatal(err)
			}
		}
		var out []string
		var hdr int64
		for _, wr := range gs.sent[2:] { // after the created responses
			out = append(out, summary(wr))
			h := wr.Header.GetRevision()
			if h < hdr {
				t.Errorf("header %d after %d (§3.12): %v", h, hdr, out)
			}
			hdr = h
			for _, e := range wr.Events {
				if e.Kv.ModRevision > h {
					t.Errorf("event at %d under header %d (§3.12): %v", e.Kv.ModRevision, h, out)
				}
			}
		}
		return out
	}
	want := func(t *testing.T, got []string, want ...string) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("sent %q\nwant %q", got, want)
		}
	}

	t.Run("joined", func(t *testing.T) {
		r0 := st.Revision()
		got := run(t, false, func(*watchhub.Stream) { put("k1"); put("k2"); put("k1") })
		// Queued: w1@r0+1, w1@r0+2, w2@r0+2, w1@r0+3. Watch 1's three go
		// as one; watch 2's older one then carries the joined header.
		want(t, got, fmt.Sprintf("w1@%d %d %d %d", r0+3, r0+1, r0+2, r0+3), fmt.Sprintf("w2@%d %d", r0+3, r0+2))
	})
	t.Run("not across a progress notification", func(t *testing.T) {
		r0 := st.Revision()
		got := run(t, false, func(ws *watchhub.Stream) { put("k1"); put("k2"); ws.RequestProgress(); put("k1"); put("k2") })
		want(t, got, fmt.Sprintf("w1@%d %d %d", r0+2, r0+1, r0+2), fmt.Sprintf("w2@%d %d", r0+2, r0+2), fmt.Sprintf("w-1@%d P", r0+2),
			fmt.Sprintf("w1@%d %d %d", r0+4, r0+3, r0+4), fmt.Sprintf("w2@%d %d", r0+4, r0+4))
	})
	t.Run("fragments", func(t *testing.T) {
		r0 := st.Revision()
		got := run(t, true, func(*watchhub.Stream) { put("k1"); put("k1") })
		want(t, got, fmt.Sprintf("w1@%d %d F", r0+2, r0+1), fmt.Sprintf("w1@%d %d", r0+2, r0+2))
	})
}
