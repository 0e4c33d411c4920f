package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/watchspec/watchspec/impl/store"
)

// A write, a read at an older revision, and a watch that replays history
// from revision 2 and then goes on live.
func Example() {
	dir, _ := os.MkdirTemp("", "watchspec-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	s.Put(ctx, store.PutRequest{Key: "a", Value: "1"}) // revision 2
	s.Put(ctx, store.PutRequest{Key: "a", Value: "2"}) // revision 3
	old, _ := s.Range(ctx, store.RangeRequest{Key: "a", Revision: 2})
	fmt.Printf("a at revision 2: %s (header %d)\n", old.KVs[0].Value, old.Revision)

	w, _ := s.Watch(ctx, store.WatchRequest{Key: "a", StartRevision: 2, PrevKV: true})
	created, _ := w.Recv(ctx)
	fmt.Printf("created at %d\n", created.Revision)
	replay, _ := w.Recv(ctx) // revisions 2 and 3, from history
	for _, e := range replay.Events {
		fmt.Printf("%s %s=%s at %d, prev %v\n", e.Type, e.KV.Key, e.KV.Value, e.KV.ModRevision, e.PrevKV != nil)
	}
	s.Delete(ctx, store.DeleteRequest{Key: "a"}) // revision 4
	live, _ := w.Recv(ctx)
	fmt.Printf("%s %s at %d, prev %s\n", live.Events[0].Type, live.Events[0].KV.Key, live.Events[0].KV.ModRevision, live.Events[0].PrevKV.Value)
	// Output:
	// a at revision 2: 1 (header 3)
	// created at 3
	// PUT a=1 at 2, prev false
	// PUT a=2 at 3, prev true
	// DELETE a at 4, prev 2
}

// A store stopped by a crash (Kill) comes back whole from its log; Check
// verifies a stopped directory; a damaged one is refused, and Recover
// rebuilds it from what verifies.
func ExampleCheck() {
	dir, _ := os.MkdirTemp("", "watchspec-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s, _ := store.Open(dir, store.Options{})
	s.Put(ctx, store.PutRequest{Key: "a", Value: "1"})
	s.Kill() // as a crash: nothing checkpointed

	rep, _ := store.Check(dir)
	fmt.Printf("OK %v, revision %d, %d group commit(s) to replay\n", rep.OK(), rep.Revision, rep.Replay)

	os.WriteFile(filepath.Join(dir, "mvcc.db"), nil, 0o600) // the data file lost
	_, err := store.Open(dir, store.Options{})
	fmt.Println("refused:", errors.Is(err, store.ErrCorrupt))

	rec, _ := store.Recover(dir)
	fmt.Printf("recovered %d record(s) from the log, revision %d\n", rec.FromLog, rec.Revision)
	s, _ = store.Open(dir, store.Options{})
	defer s.Close()
	r, _ := s.Range(ctx, store.RangeRequest{Key: "a"})
	fmt.Printf("a=%s\n", r.KVs[0].Value)
	// Output:
	// OK true, revision 2, 1 group commit(s) to replay
	// refused: true
	// recovered 1 record(s) from the log, revision 2
	// a=1
}

// A full disk raises etcd's NOSPACE alarm: puts fail with etcd's error
// until the alarm is disarmed (once space is freed).
func ExampleStore_Alarms() {
	dir, _ := os.MkdirTemp("", "watchspec-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s, _ := store.Open(dir, store.Options{})
	defer s.Close()

	s.RaiseAlarm(store.AlarmNoSpace) // as a write that ran out of space does
	fmt.Println(s.Alarms())
	_, err := s.Put(ctx, store.PutRequest{Key: "a", Value: "1"})
	fmt.Println(err)
	s.DisarmAlarm(store.AlarmNoSpace)
	_, err = s.Put(ctx, store.PutRequest{Key: "a", Value: "1"})
	fmt.Println(err, s.Alarms())
	// Output:
	// [NOSPACE]
	// etcdserver: mvcc: database space exceeded
	// <nil> []
}
