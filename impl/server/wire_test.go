package server

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
	"github.com/watchspec/watchspec/impl/watchhub"
)

// kvGen draws key-values with every field sometimes zero or empty, and
// revisions across varint lengths.
func kvGen() *rapid.Generator[mvcc.KeyValue] {
	rev := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(1, 200), rapid.Int64Range(1, 1<<62))
	return rapid.Custom(func(t *rapid.T) mvcc.KeyValue {
		return mvcc.KeyValue{
			Key:            rapid.StringN(0, 20, -1).Draw(t, "key"),
			Value:          rapid.OneOf(rapid.Just(""), rapid.String(), rapid.StringN(200, 400, -1)).Draw(t, "value"),
			CreateRevision: rev.Draw(t, "create"),
			ModRevision:    rev.Draw(t, "mod"),
			Version:        rev.Draw(t, "version"),
			Lease:          rapid.OneOf(rapid.Just(int64(0)), rapid.Int64()).Draw(t, "lease"),
		}
	})
}

// The wire encoding of events (wire.go) is byte for byte what gRPC's proto
// codec writes for the same WatchResponse with its events decoded (toPB,
// the message etcd sends): a client cannot tell them apart.
func TestWireEncodingIsProtoMarshal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		evs := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) mvcc.Event {
			e := mvcc.Event{KV: kvGen().Draw(t, "kv")}
			if rapid.Bool().Draw(t, "delete") {
				e.Type = mvcc.Delete
			}
			if rapid.Bool().Draw(t, "prev") {
				p := kvGen().Draw(t, "prevKV")
				e.PrevKV = &p
			}
			return e
		}), 0, 5).Draw(t, "events")
		hdr := &pb.ResponseHeader{ClusterId: 1, MemberId: 2, Revision: rapid.Int64Min(0).Draw(t, "rev"), RaftTerm: 3}
		want := &pb.WatchResponse{Header: hdr, WatchId: rapid.Int64().Draw(t, "id")}
		for i := range evs {
			want.Events = append(want.Events, toPBEvent(&evs[i]))
		}
		got := &pb.WatchResponse{Header: hdr, WatchId: want.WatchId}
		var enc []byte
		for i := range evs {
			enc = appendEventField(enc, &evs[i])
		}
		got.ProtoReflect().SetUnknown(enc)
		wb, err1 := proto.Marshal(want)
		gb, err2 := proto.Marshal(got)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !bytes.Equal(wb, gb) {
			t.Fatalf("encodings differ:\n proto.Marshal %x\n wire.go       %x", wb, gb)
		}
		// And the client reads the events back.
		var back pb.WatchResponse
		if err := proto.Unmarshal(gb, &back); err != nil || len(back.Events) != len(evs) {
			t.Fatalf("decoded %d events (%v), want %d", len(back.Events), err, len(evs))
		}
		for i, e := range back.Events {
			if !proto.Equal(e, want.Events[i]) {
				t.Fatalf("event %d decoded as %v, want %v", i, e, want.Events[i])
			}
		}
	})
}

// Events are encoded once per batch, not once per watch: two streams of
// three watches each (with and without prevKV) deliver ten commits live and
// then, having fallen behind, in catch-up responses; every response's wire
// bytes decode to its events, and the batches' encodings hold each event
// once per variant (with or without PrevKV) — not once per watch.
func TestEventsAreEncodedOncePerBatch(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(t.TempDir(), store.Options{KV: mvcc.Options{UnsafeNoFsync: true},
		Watch: watchhub.Options{Manual: true, StreamCapacity: 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var streams []*watchhub.Stream
	for range 2 {
		ws := st.NewWatchStream(nil)
		for i := range 3 {
			if _, err := ws.Watch(ctx, watchhub.Request{Key: "k", RangeEnd: "l", PrevKV: i == 0}); err != nil {
				t.Fatal(err)
			}
		}
		streams = append(streams, ws)
	}
	const commits = 10
	for i := range commits {
		if _, err := st.Put(ctx, mvcc.PutRequest{Key: fmt.Sprint("k", i%3), Value: fmt.Sprint("v", i)}); err != nil {
			t.Fatal(err)
		}
	}
	batches := map[*wireEvents]bool{}
	delivered, shared := 0, 0
	for range 10 {
		for _, ws := range streams {
			for {
				r, err := ws.Recv(doneCtx())
				if err != nil {
					break
				}
				if len(r.Events) == 0 {
					continue
				}
				delivered += len(r.Events)
				enc := encodeEvents(&r, nil)
				var got pb.WatchResponse
				if err := proto.Unmarshal(enc, &got); err != nil || len(got.Events) != len(r.Events) {
					t.Fatalf("%d events decode as %d (%v)", len(r.Events), len(got.Events), err)
				}
				for i, e := range got.Events {
					if want := toPBEvent(&r.Events[i]); !proto.Equal(e, want) {
						t.Fatalf("event %d decodes as %v, want %v", i, e, want)
					}
				}
				if b, _ := r.Shared(); b != nil {
					shared += len(r.Events)
					batches[b.Memo(newWireEvents).(*wireEvents)] = true
				}
			}
		}
		st.Hub().Flush()
	}
	if want := 2 * 3 * commits; delivered != want {
		t.Fatalf("%d events delivered, want %d", delivered, want)
	}
	encoded := 0
	for we := range batches {
		encoded += len(we.off) - 1
	}
	// Each commit's event is in the hub's recent commits once, with and
	// without PrevKV: at most 2 × commits encodings for 60 deliveries.
	if shared == 0 || encoded > 2*commits {
		t.Fatalf("%d of %d delivered events shared a batch; %d encodings, want at most %d", shared, delivered, encoded, 2*commits)
	}
	t.Logf("%d events delivered, %d from shared batches, %d encodings", delivered, shared, encoded)
}

func doneCtx() context.Context {
	c, cancel := context.WithCancel(context.Background())
	cancel()
	return c
}
