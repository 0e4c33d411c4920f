package record_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/watchspec/watchspec/impl/server"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/traces"
	"github.com/watchspec/watchspec/traces/record"
)

// cli.KV = rec.NewKV(cli.KV) and cli.Watcher = rec.NewWatcher(cli.Watcher)
// record every call of existing code — puts, gets, deletes, transactions,
// compaction, a watch and a progress request — as the trace's records, and
// the trace passes the check; a forged response is caught (SPEC §2.8
// SerializableRead): what is checked is what the server said.
func TestNewKVRecordsExistingClient(t *testing.T) {
	srv, err := server.Start(t.TempDir(), "127.0.0.1:0", server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	base, err := cli.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w, err := traces.NewWriter(&out, traces.Header{System: "reference", UniqueValues: true, BaseRevision: base.Header.Revision})
	if err != nil {
		t.Fatal(err)
	}
	rec := record.New(w)
	cli.KV = rec.NewKV(cli.KV)
	cli.Watcher = rec.NewWatcher(cli.Watcher)
	wctx, stopWatch := context.WithCancel(ctx)
	wch := cli.Watch(wctx, "", clientv3.WithFromKey(), clientv3.WithRev(base.Header.Revision+1), clientv3.WithPrevKV())

	// Existing code, unchanged.
	if _, err := cli.Put(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	put, err := cli.Put(ctx, "b", "2", clientv3.WithPrevKV())
	if err != nil {
		t.Fatal(err)
	}
	txn, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision("a"), "<", put.Header.Revision)).
		Then(clientv3.OpPut("a", "3"), clientv3.OpGet("b")).Else(clientv3.OpDelete("a")).Commit()
	if err != nil || !txn.Succeeded {
		t.Fatalf("txn: %v, %+v", err, txn)
	}
	if _, err := cli.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithSerializable()); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, "a", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, txn.Header.Revision); err != nil {
		t.Fatal(err)
	}
	var events int
	for wr := range wch { // until the delete's events, the last write
		if wr.Created {
			t.Error("the created response reached a watch that did not ask for it")
		}
		events += len(wr.Events)
		if events >= 4 {
			break
		}
	}
	if err := cli.RequestProgress(wctx); err != nil {
		t.Fatal(err)
	}
	stopWatch()
	for range wch {
	}
	// Not expressible: refused, not sent.
	if _, err := cli.Get(ctx, "a", clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend)); err == nil || !strings.Contains(err.Error(), "cannot be recorded") {
		t.Errorf("a sorted get: err %v, want one saying it cannot be recorded", err)
	}
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}

	tr, err := traces.Read(&out, "newkv.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Watches) != 1 || len(tr.Watches[0].Responses) < 2 || len(tr.ProgressRequests) != 1 {
		t.Errorf("the watch is recorded wrong: %d watches, %d progress requests", len(tr.Watches), len(tr.ProgressRequests))
	}
	if len(tr.Ops) != 6 {
		t.Fatalf("%d operations recorded, want 6:\n%s", len(tr.Ops), out.String())
	}
	if !tr.Ops[3].Serializable || tr.Ops[2].Request.Txn == nil || len(tr.Ops[2].Request.Txn.Compare) != 1 {
		t.Errorf("the serializable read or the transaction is recorded wrong: %+v", tr.Ops)
	}
	res, err := linearizability.Check(tr, linearizability.Options{SingleServer: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Err(); err != nil {
		t.Errorf("the recorded trace does not pass: %v", err)
	}

	// The same trace with a response changed no longer passes: the check
	// sees what was recorded.
	tr.Ops[3].Response.Range.KVs[0].Value = "forged"
	res, err = linearizability.Check(tr, linearizability.Options{SingleServer: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Err() == nil {
		t.Error("a forged response passes the check")
	}
}
