package adversary_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/watchspec/watchspec/adversary"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/model/watch"
)

// The fragment workload: fragTxns transactions, each putting fragKeys keys
// under fragPrefix at one revision, written before the watch so that it
// catches up on them in large responses.
const (
	fragPrefix = "/frag/"
	fragTxns   = 40
	fragKeys   = 3
)

// writeFragWorkload makes the workload's transactions through endpoint and
// returns the model's history of them (the store starts empty: revision 1).
func writeFragWorkload(t *testing.T, endpoint string) *kv.History {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var s kv.State
	h := &kv.History{}
	for i := range fragTxns {
		var ops []clientv3.Op
		var mops []kv.Op
		for j := range fragKeys {
			key, val := fmt.Sprintf("%sk%d", fragPrefix, (i+j)%7), fmt.Sprintf("v%d.%d", i, j)
			ops = append(ops, clientv3.OpPut(key, val))
			mops = append(mops, kv.Op{Put: &kv.PutRequest{Key: key, Value: val}})
		}
		r, err := cli.Txn(t.Context()).Then(ops...).Commit()
		if err != nil {
			t.Fatal(err)
		}
		s, _ = kv.Step(s, kv.Request{Txn: &kv.TxnRequest{Success: mops}})
		c, _ := s.LastCommit()
		if c.Revision != r.Header.Revision {
			t.Fatalf("transaction %d committed at %d, the model says %d (nobody else writes)", i, r.Header.Revision, c.Revision)
		}
		if err := h.Append(c); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// rawFragWatch watches fragPrefix from revision 1 with fragment=true over
// etcd's Watch RPC itself (no clientv3), until it has seen the head's
// events or its stream ends (the adversary may reset it), and returns the
// wire messages as they came.
func rawFragWatch(t *testing.T, endpoint string, head int64) []*pb.WatchResponse {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(endpoint, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	stream, err := pb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte(fragPrefix), RangeEnd: []byte(kv.PrefixEnd(fragPrefix)), StartRevision: 1, Fragment: true}}}); err != nil {
		t.Fatal(err)
	}
	var got []*pb.WatchResponse
	for {
		r, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() != nil {
				t.Fatalf("the watch saw %d messages before the deadline: %v", len(got), err)
			}
			t.Logf("the watch stream ended after %d messages: %v", len(got), err)
			return got // a reset: judge what came before it
		}
		got = append(got, r)
		if n := len(r.Events); n > 0 && !r.Fragment && r.Events[n-1].Kv.ModRevision >= head {
			return got
		}
	}
}

// joined reads wire messages as etcd's clientv3 delivers them: fragments
// joined with what follows them, up to the one without Fragment set.
func joined(msgs []*pb.WatchResponse) []watch.Response {
	var out []watch.Response
	var cur *watch.Response
	for _, m := range msgs {
		if cur == nil {
			cur = &watch.Response{Revision: m.Header.GetRevision(), Created: m.Created, Canceled: m.Canceled, CompactRevision: m.CompactRevision}
		}
		cur.Events = append(cur.Events, fromPBEvents(m.Events)...)
		if !m.Fragment {
			out = append(out, *cur)
			cur = nil
		}
	}
	return out
}

// ignoringFragments reads each wire message as a whole response: the bug.
func ignoringFragments(msgs []*pb.WatchResponse) []watch.Response {
	out := make([]watch.Response, len(msgs))
	for i, m := range msgs {
		out[i] = watch.Response{Revision: m.Header.GetRevision(), Created: m.Created, Canceled: m.Canceled,
			CompactRevision: m.CompactRevision, Events: fromPBEvents(m.Events)}
	}
	return out
}

func fromPBEvents(evs []*mvccpb.Event) []kv.Event {
	out := make([]kv.Event, len(evs))
	for i, e := range evs {
		out[i] = kv.Event{KV: kv.KeyValue{Key: string(e.Kv.Key), Value: string(e.Kv.Value), CreateRevision: e.Kv.CreateRevision,
			ModRevision: e.Kv.ModRevision, Version: e.Kv.Version, Lease: e.Kv.Lease}}
		if e.Type == mvccpb.DELETE {
			out[i].Type = kv.Delete
		}
	}
	return out
}

// fragmentRun writes the workload to endpoint, watches it with fragments
// allowed, and returns what the model's watch validator finds in the
// stream read both ways, and how many messages were fragments.
func fragmentRun(t *testing.T, endpoint string) (joinedViolations, ignoringViolations []spec.Violation, fragments int) {
	t.Helper()
	h := writeFragWorkload(t, endpoint)
	msgs := rawFragWatch(t, endpoint, h.Head())
	for _, m := range msgs {
		if m.Fragment {
			fragments++
		}
	}
	req := watch.Request{Key: fragPrefix, RangeEnd: kv.PrefixEnd(fragPrefix), StartRevision: 1, Fragment: true}
	return watch.Validate(h, req, joined(msgs)), watch.Validate(h, req, ignoringFragments(msgs)), fragments
}

// fragmentSeed is an adversary seed that fragments the catch-up of the
// watch in fragmentRun: its first response holds every revision, and the
// stream's first fragment draw decides. Of seeds 1..8, 2, 3, 6, 7 and 8
// fragment it (28 to 58 fragments); 1, 4 and 5 send it whole.
const fragmentSeed = 2

// SPEC §3.4 Atomic holds at the client API, not on the wire (§6): a server
// may send a response of a watch that asked for fragments as fragments cut
// between any two events, and a client that joins them (as clientv3 does)
// sees every revision whole. A client that asks for fragments but reads
// each message as a response is caught by the adversary — it sees a
// revision torn in two, §3.4 Atomic — and passes against the plain
// reference server, which, like etcd, fragments only responses above its
// request size limit (1.5 MiB).
func TestClientIgnoringFragmentsIsCaught(t *testing.T) {
	t.Run("plain server", func(t *testing.T) {
		j, ig, frags := fragmentRun(t, plainServer(t))
		if len(j) > 0 || len(ig) > 0 || frags > 0 {
			t.Fatalf("against the plain server: %d fragments, joined %v, ignoring %v; want no fragments and no violation", frags, j, ig)
		}
	})
	t.Run(fmt.Sprintf("adversary seed %d", fragmentSeed), func(t *testing.T) {
		srv := adversary.Run(t, fragmentSeed)
		j, ig, frags := fragmentRun(t, srv.Endpoint())
		if len(j) > 0 {
			t.Fatalf("the joined stream fails: %v; the adversary's fragments must be legal\n%s", j, srv.Report())
		}
		if frags == 0 || srv.Report().Counts["fragment"] == 0 {
			t.Fatalf("seed %d sent no fragments\n%s", fragmentSeed, srv.Report())
		}
		atomic := false
		for _, v := range ig {
			atomic = atomic || v.Property == spec.Atomic
		}
		if !atomic {
			t.Fatalf("%d fragments read as responses gave %v; want §3.4 Atomic\n%s", frags, ig, srv.Report())
		}
		t.Logf("seed %d: %d fragments; read as responses: %v", fragmentSeed, frags, ig[0])
	})
}
