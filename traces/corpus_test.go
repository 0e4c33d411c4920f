package traces_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/watchspec/watchspec/conform"
	"github.com/watchspec/watchspec/internal/corpus"
	"github.com/watchspec/watchspec/internal/etcdtest"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

var (
	update     = flag.Bool("update", false, "regenerate the reconstructed bug traces in corpus/")
	recordEtc  = flag.Bool("record-etcd", false, "record the etcd traces of corpus/ again (needs a few seconds of embedded etcd)")
	recordOnly = flag.String("record-etcd.only", "", "with -record-etcd, record only the traces whose file name contains this")
)

func readCorpusTable(t *testing.T) []corpus.Row {
	rows, err := corpus.ReadTable("../docs/CORPUS.md")
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestCorpus checks every trace of corpus/ and demands exactly the verdict
// docs/CORPUS.md gives it: valid traces (recorded from real etcd and from
// the reference store) pass; each reconstructed upstream bug fails with
// exactly its property. Every file in corpus/ must have a row. Each trace is
// its own subtest, so a failure names the file.
func TestCorpus(t *testing.T) {
	if *update {
		generateBugTraces(t)
	}
	if *recordEtc {
		recordEtcdTraces(t)
	}
	rows := readCorpusTable(t)
	listed := map[string]bool{}
	for _, r := range rows {
		listed[r.File] = true
	}
	files, _ := filepath.Glob("corpus/*.ndjson*")
	if len(files) == 0 {
		t.Fatal("the corpus is empty")
	}
	for _, f := range files {
		if !listed[filepath.Base(f)] {
			t.Errorf("corpus/%s has no row in docs/CORPUS.md", filepath.Base(f))
		}
	}
	for _, row := range rows {
		t.Run(row.File, func(t *testing.T) {
			tr, err := traces.ReadFile(filepath.Join("corpus", row.File))
			if err != nil {
				t.Fatal(err)
			}
			res, err := linearizability.Check(tr, linearizability.Options{})
			if err != nil {
				t.Fatal(err)
			}
			got := map[spec.Property]bool{}
			for _, v := range res.Violations {
				got[v.Property] = true
			}
			want := map[spec.Property]bool{}
			for _, p := range row.Expected {
				want[p] = true
			}
			for p := range want {
				if !got[p] {
					t.Errorf("expected FAIL %s, but it holds", p)
				}
			}
			for _, v := range res.Violations {
				if !want[v.Property] {
					t.Errorf("unexpected FAIL %s %s: %s", v.Property, v.Where, v.Violation)
				}
			}
			if res.Verdict == linearizability.Unknown {
				t.Errorf("linearizability undecided")
			}
		})
	}
}

// builder writes a small trace by hand: operations run through the model
// (so their responses are what a correct store answers) and watch responses
// are whatever the scenario says a buggy server sent.
type builder struct {
	t     *traces.Trace
	s     kv.State
	h     *kv.History
	clock int64
}

// newBuilder starts a reconstructed trace. They stay version 1, as they
// were recorded, so that -update rewrites them byte for byte.
func newBuilder(name, issue string) *builder {
	return &builder{h: &kv.History{}, t: &traces.Trace{Name: name, Header: traces.Header{
		Format: traces.Format, Version: 1, System: "etcd (reconstructed symptom of " + issue + ")",
		Start: "2026-11-29T12:00:00Z", Tool: "traces/corpus_test.go generateBugTraces", UniqueValues: true}}}
}

func (b *builder) tick() int64 { b.clock += 1000; return b.clock }

// op runs req by client through the model and records it.
func (b *builder) op(client int, req kv.Request) kv.Response {
	call := b.tick()
	var resp kv.Response
	b.s, resp = kv.Step(b.s, req)
	if c, ok := b.s.LastCommit(); ok && c.Revision > b.h.Head() {
		b.h.Append(c)
	}
	if req.Compact != nil && resp.Err == nil {
		b.h.Compact(req.Compact.Revision)
	}
	b.t.Ops = append(b.t.Ops, traces.Op{Client: client, Call: call, Return: b.tick(), Request: req, Response: &resp})
	return resp
}

func (b *builder) put(client int, key, value string) kv.Response {
	return b.op(client, kv.Request{Put: &kv.PutRequest{Key: key, Value: value}})
}

// watch creates a watch and delivers its created response.
func (b *builder) watch(client, id int, req watch.Request) *traces.Watch {
	w := &traces.Watch{Client: client, ID: id, Time: b.tick(), Request: req}
	b.t.Watches = append(b.t.Watches, w)
	b.recv(w, watch.Response{Created: true, Revision: b.s.Revision()})
	return w
}

func (b *builder) recv(w *traces.Watch, r watch.Response) {
	w.Responses = append(w.Responses, traces.WatchResponse{Time: b.tick(), Response: r})
}

// events returns the committed events at rev on keys the watch matches, with
// the PrevKV the watch asked for.
func (b *builder) events(w *traces.Watch, rev int64) []kv.Event {
	c, _ := b.h.Commit(rev)
	var out []kv.Event
	for _, e := range c.Events {
		if w.Request.Matches(e) {
			if !w.Request.PrevKV {
				e.PrevKV = nil
			}
			out = append(out, e)
		}
	}
	return out
}

// deliver sends the events of the given revisions, one response each, with
// header revision header (0: the revision itself).
func (b *builder) deliver(w *traces.Watch, header int64, revs ...int64) {
	for _, r := range revs {
		b.recv(w, watch.Response{Revision: max(header, r), Events: b.events(w, r)})
	}
}

func (b *builder) annotate(tag, text string) {
	t := b.tick()
	b.t.Annotations = append(b.t.Annotations, traces.Annotation{Time: t, End: t, Tag: tag, Text: text})
}

func (b *builder) write(t *testing.T, file string) {
	var buf bytes.Buffer
	if err := traces.Write(&buf, b.t); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("corpus", file), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// generateBugTraces writes the reconstructed upstream bugs. Each is the
// smallest run that shows the symptom the issue reports, as a client of the
// buggy server would have recorded it. (The buggy etcd versions and the
// failpoints that trigger them cannot run here; docs/CORPUS.md says so.)
func generateBugTraces(t *testing.T) {
	pods := "/registry/pods/default/"
	{ // etcd#15220: a requested progress notification overtook queued events.
		b := newBuilder("etcd-15220", "etcd#15220")
		w := b.watch(2, 1, watch.Request{Key: pods, RangeEnd: kv.PrefixEnd(pods), ProgressNotify: true})
		b.put(1, pods+"a", "1")
		b.put(1, pods+"a", "2")
		b.put(1, pods+"a", "3")
		b.deliver(w, 0, 2)
		b.recv(w, watch.Response{Revision: 4}) // answered through the control stream, ahead of revisions 3 and 4
		b.deliver(w, 0, 3, 4)
		b.write(t, "etcd-15220-progress-overtakes-events.ndjson")
	}
	{ // etcd#15271: after restoring a leader snapshot, a member replayed old revisions.
		b := newBuilder("etcd-15271", "etcd#15271")
		w := b.watch(2, 1, watch.Request{Key: pods, RangeEnd: kv.PrefixEnd(pods)})
		for i := range 4 {
			b.put(1, pods+"a", fmt.Sprint(i))
		}
		b.deliver(w, 0, 2, 3, 4)
		b.annotate("restore", "the member restored a snapshot from the leader")
		b.recv(w, watch.Response{Revision: 5, Events: append(b.events(w, 2), b.events(w, 3)...)})
		b.deliver(w, 0, 5)
		b.write(t, "etcd-15271-watch-travels-back-in-time.ndjson")
	}
	{ // etcd#17247: a transaction-buffer change duplicated a watch event.
		b := newBuilder("etcd-17247", "etcd#17247")
		w := b.watch(2, 1, watch.Request{Key: pods, RangeEnd: kv.PrefixEnd(pods)})
		b.op(1, kv.Request{Txn: &kv.TxnRequest{Success: []kv.Op{
			{Put: &kv.PutRequest{Key: pods + "a", Value: "1"}}, {Put: &kv.PutRequest{Key: pods + "b", Value: "1"}}}}})
		evs := b.events(w, 2)
		b.recv(w, watch.Response{Revision: 2, Events: []kv.Event{evs[0], evs[1], evs[1]}})
		b.write(t, "etcd-17247-duplicated-event.ndjson")
	}
	{ // etcd#17529: a starved slow watcher's compaction notice could not be
		// delivered, yet the watcher was advanced past the compacted revisions.
		b := newBuilder("etcd-17529", "etcd#17529")
		for i := range 8 {
			b.put(1, pods+"a", fmt.Sprint(i))
		}
		w := b.watch(2, 1, watch.Request{Key: pods, RangeEnd: kv.PrefixEnd(pods), StartRevision: 2, PrevKV: true})
		b.deliver(w, 9, 2, 3)
		b.op(3, kv.Request{Compact: &kv.CompactRequest{Revision: 7}})
		b.deliver(w, 9, 8, 9)
		b.write(t, "etcd-17529-compaction-notice-lost.ndjson")
	}
	{ // etcd#18089: compacting at the revision of a delete removed the
		// tombstone; a watch from that revision missed the DELETE.
		b := newBuilder("etcd-18089", "etcd#18089")
		for _, v := range []string{"v2", "v3", "v4"} {
			b.put(1, "k", v)
		}
		b.op(1, kv.Request{Delete: &kv.DeleteRequest{Key: "k"}})
		b.put(1, "k", "v6")
		b.op(1, kv.Request{Compact: &kv.CompactRequest{Revision: 5}})
		w := b.watch(2, 1, watch.Request{Key: "k", StartRevision: 5})
		b.deliver(w, 6, 6)
		b.write(t, "etcd-18089-delete-at-compaction-revision.ndjson")
	}
	{ // etcd#19179: after a crash during a multi-batch compaction, the key
		// index was not rebuilt for a key whose only revision left was its
		// tombstone; a watch from the compaction revision missed the DELETE.
		b := newBuilder("etcd-19179", "etcd#19179")
		b.put(1, pods+"a", "1")
		b.op(1, kv.Request{Delete: &kv.DeleteRequest{Key: pods + "a"}})
		b.op(1, kv.Request{Compact: &kv.CompactRequest{Revision: 3}})
		b.annotate("restart", "the server crashed during the compaction and restarted")
		b.put(1, pods+"b", "1")
		w := b.watch(2, 1, watch.Request{Key: pods, RangeEnd: kv.PrefixEnd(pods), StartRevision: 3})
		b.deliver(w, 4, 4)
		b.write(t, "etcd-19179-delete-missing-after-restart.ndjson")
	}
	{ // etcd#20221: a watch on a future revision received progress
		// notifications below its start revision.
		b := newBuilder("etcd-20221", "etcd#20221")
		b.put(1, pods+"a", "1")
		w := b.watch(2, 1, watch.Request{Key: pods, RangeEnd: kv.PrefixEnd(pods), StartRevision: 10, ProgressNotify: true})
		b.put(1, pods+"a", "2")
		b.recv(w, watch.Response{Revision: 3})
		b.write(t, "etcd-20221-progress-below-future-start.ndjson")
	}
	k8sBugTraces(t)
	{ // A stale read: a read after a completed write misses it (the shape of
		// etcd#20418, serializable reads after a process pause).
		b := newBuilder("stale-read", "a stale read (etcd#20418)")
		b.put(1, "a", "1")
		old := b.s
		b.put(1, "a", "2")
		_, stale := kv.Step(old, kv.Request{Range: &kv.RangeRequest{Key: "a"}})
		call := b.tick()
		b.t.Ops = append(b.t.Ops, traces.Op{Client: 2, Call: call, Return: b.tick(), Request: kv.Request{Range: &kv.RangeRequest{Key: "a"}}, Response: &stale})
		b.write(t, "stale-read.ndjson")
	}
}

// recordEtcdTraces records short conformance runs against real embedded etcd
// (those whose file name contains -record-etcd.only).
func recordEtcdTraces(t *testing.T) {
	for _, tc := range []struct {
		file string
		opts etcdtest.Options
		cfg  conform.Config
		// used, when set, makes the store one in use before the run:
		// other keys written, then compacted.
		used bool
		// kills, when set, kills or restarts a member every second.
		kills bool
	}{
		{file: "etcd-3.7.3-1member.ndjson.gz", opts: etcdtest.Options{Members: 1},
			cfg: conform.Config{Duration: 1500 * time.Millisecond, Clients: 3, Watchers: 3, Seed: 1}},
		{file: "etcd-3.7.3-3members-kills.ndjson.gz", opts: etcdtest.Options{Members: 3, Processes: true}, kills: true,
			cfg: conform.Config{Duration: 3 * time.Second, Clients: 3, Watchers: 3, CatchUpWatches: 50, Seed: 5}},
		{file: "etcd-3.7.3-precompacted.ndjson.gz", opts: etcdtest.Options{Members: 1}, used: true,
			cfg: conform.Config{Duration: 1500 * time.Millisecond, Clients: 3, Watchers: 3, CatchUpWatches: -1, Seed: 4}},
	} {
		if !strings.Contains(tc.file, *recordOnly) {
			continue
		}
		cluster, err := etcdtest.Start(tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		cfg := tc.cfg
		cfg.Endpoints, cfg.System, cfg.SystemVersion = cluster.Endpoints, "etcd", etcdtest.Version
		if tc.used {
			useStore(t, cluster.Endpoints)
		}
		if tc.kills {
			rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 77))
			n := 0
			cfg.RestartEvery = time.Second
			cfg.Disrupt = func(ctx context.Context) (conform.Disruption, error) {
				n++
				kill := n%2 == 1
				text, err := cluster.KillOrRestart(ctx, rng, kill, n%4 == 1, time.Duration(100+rng.IntN(500))*time.Millisecond)
				return conform.Disruption{Kill: kill, Text: text}, err
			}
		}
		var buf bytes.Buffer
		stats, err := conform.Record(context.Background(), cfg, &buf)
		cluster.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %+v", tc.file, stats)
		var z bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
		zw.Write(buf.Bytes())
		zw.Close()
		if err := os.WriteFile(filepath.Join("corpus", tc.file), z.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// useStore writes keys outside any run's prefix and compacts at the head,
// so that the store is one in use (the apiserver compacts every 5 minutes).
func useStore(t *testing.T, endpoints []string) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	var rev int64
	for i := range 30 {
		resp, err := cli.Put(ctx, fmt.Sprintf("/someone-else/%d", i%7), fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if _, err := cli.Compact(ctx, rev-5); err != nil {
		t.Fatal(err)
	}
}

// TestCorpusTableIsSorted keeps docs/CORPUS.md readable.
func TestCorpusTableIsSorted(t *testing.T) {
	rows := readCorpusTable(t)
	names := make([]string, len(rows))
	for i, r := range rows {
		names[i] = r.File
	}
	if !sort.StringsAreSorted(names) {
		t.Errorf("docs/CORPUS.md lists the traces out of order: %v", names)
	}
}

// obj returns the stored object key at revision rev (0: now).
func (b *builder) obj(key string, rev int64) k8s.Object {
	kv, _ := b.s.Get(key, rev)
	return k8s.FromKV(kv)
}

func (b *builder) objs(prefix string, rev int64) []k8s.Object {
	var out []k8s.Object
	for _, k := range b.s.Snapshot(prefix, kv.PrefixEnd(prefix), rev) {
		out = append(out, k8s.FromKV(k))
	}
	return out
}

// informer helpers: entries of the trace's informer run.
func (b *builder) run() *k8s.Run {
	if b.t.K8s == nil {
		b.t.K8s = &k8s.Run{}
	}
	return b.t.K8s
}

func (b *builder) entry(e k8s.Entry) { b.run().Entries = append(b.run().Entries, e) }

func (b *builder) list(prefix string, opts k8s.ListOptions, rv int64) []k8s.Object {
	items := b.objs(prefix, rv)
	r := b.run()
	r.Lists = append(r.Lists, k8s.ListCall{Prefix: prefix, Options: opts, Before: b.s.Revision(), After: b.s.Revision(),
		Result: k8s.ListResult{ResourceVersion: rv, Items: items}})
	i := len(r.Lists) - 1
	b.entry(k8s.Entry{List: &i})
	return items
}

func (b *builder) notify(n k8s.Notification) { b.entry(k8s.Entry{Notification: &n}) }

func ptrTo[T any](v T) *T { return &v }

// k8sBugTraces writes the reconstructed Kubernetes bugs: informer runs over
// a store whose history the trace's writes give.
func k8sBugTraces(t *testing.T) {
	pods := k8s.GVR{Version: "v1", Resource: "pods"}
	prefix := pods.Prefix("default")
	start := func(name, issue string) *builder {
		b := newBuilder(name, issue)
		b.t.Header.System = "client-go informer (reconstructed symptom of " + issue + ")"
		b.put(1, pods.Key("default", "web-0"), "v1")
		b.entry(k8s.Entry{HandlerAdded: ptrTo(0)})
		b.entry(k8s.Entry{Start: &k8s.StartEntry{Revision: b.s.Revision()}})
		return b
	}
	initial := func(b *builder, items []k8s.Object) {
		for _, o := range items {
			b.notify(k8s.Notification{Handler: 0, Type: k8s.OnAdd, New: ptrTo(o), InInitialList: true})
		}
		b.entry(k8s.Entry{HasSynced: ptrTo(0)})
	}
	finish := func(b *builder, t *testing.T, file string, cache []k8s.Object) {
		b.entry(k8s.Entry{Quiesced: true})
		b.run().Prefix, b.run().Cache = prefix, cache
		b.write(t, file)
	}
	{ // kubernetes#115620 (issue #115658): an object created and deleted
		// while the informer was disconnected, its ADDED still queued, was
		// not deleted by the relist and leaked.
		b := start("kubernetes-115620", "kubernetes#115620")
		initial(b, b.list(prefix, k8s.ListOptions{}, b.s.Revision()))
		b.put(1, pods.Key("default", "tmp"), "t1")
		tmp := b.obj(pods.Key("default", "tmp"), 0)
		b.op(1, kv.Request{Delete: &kv.DeleteRequest{Key: pods.Key("default", "tmp")}})
		b.notify(k8s.Notification{Handler: 0, Type: k8s.OnAdd, New: &tmp})
		relisted := b.list(prefix, k8s.ListOptions{ResourceVersion: k8s.RV(b.s.Revision())}, b.s.Revision())
		finish(b, t, "kubernetes-115620-relist-leaks-object.ndjson", append(relisted, tmp))
	}
	{ // kubernetes#83810: an Add after a delete and re-create during a
		// disconnection was never delivered.
		b := start("kubernetes-83810", "kubernetes#83810")
		initial(b, b.list(prefix, k8s.ListOptions{}, b.s.Revision()))
		web := b.obj(pods.Key("default", "web-0"), 0)
		b.op(1, kv.Request{Delete: &kv.DeleteRequest{Key: pods.Key("default", "web-0")}})
		b.put(1, pods.Key("default", "web-0"), "v2")
		relisted := b.list(prefix, k8s.ListOptions{ResourceVersion: k8s.RV(b.s.Revision())}, b.s.Revision())
		b.notify(k8s.Notification{Handler: 0, Type: k8s.OnDelete, Old: &web, Tombstone: true})
		finish(b, t, "kubernetes-83810-add-after-recreate-lost.ndjson", relisted)
	}
	{ // kubernetes#73845: the watch cache delivered an event older than one
		// it had already delivered (buffered events after the initial ones).
		b := start("kubernetes-73845", "kubernetes#73845")
		items := b.list(prefix, k8s.ListOptions{}, b.s.Revision())
		initial(b, items)
		from := b.s.Revision()
		b.put(1, pods.Key("default", "web-0"), "v2")
		v2 := b.obj(pods.Key("default", "web-0"), 0)
		b.put(1, pods.Key("default", "web-0"), "v3")
		v3 := b.obj(pods.Key("default", "web-0"), 0)
		r := b.run()
		r.Watches = append(r.Watches, k8s.WatchCall{Prefix: prefix, Options: k8s.WatchOptions{ResourceVersion: k8s.RV(from)}, Before: from, After: b.s.Revision()})
		for _, o := range []k8s.Object{v2, v3, v2} {
			ev := k8s.WatchEvent{Type: k8s.Modified, Object: o}
			r.Watches[0].Events = append(r.Watches[0].Events, ev)
			b.entry(k8s.Entry{WatchEvent: &k8s.WatchEventEntry{Watch: 0, Event: ev}})
		}
		b.notify(k8s.Notification{Handler: 0, Type: k8s.OnUpdate, Old: &items[0], New: &v2})
		b.notify(k8s.Notification{Handler: 0, Type: k8s.OnUpdate, Old: &v2, New: &v3})
		finish(b, t, "kubernetes-73845-watch-cache-back-in-time.ndjson", []k8s.Object{v3})
	}
	{ // kubernetes#136583: a WatchList broken during its initial events; the
		// reflector had adopted the resourceVersion of a synthetic ADDED.
		b := start("kubernetes-136583", "kubernetes#136583")
		b.put(1, pods.Key("default", "web-1"), "v1")
		b.put(1, pods.Key("default", "web-0"), "v2")
		yes := true
		r := b.run()
		r.Watches = append(r.Watches, k8s.WatchCall{Prefix: prefix, Before: b.s.Revision(), After: b.s.Revision(),
			Options: k8s.WatchOptions{SendInitialEvents: &yes, ResourceVersionMatch: "NotOlderThan", AllowWatchBookmarks: true}})
		web1 := b.obj(pods.Key("default", "web-1"), 0)
		ev := k8s.WatchEvent{Type: k8s.Added, Object: web1}
		r.Watches[0].Events = append(r.Watches[0].Events, ev)
		b.entry(k8s.Entry{WatchEvent: &k8s.WatchEventEntry{Watch: 0, Event: ev}})
		b.entry(k8s.Entry{SyncedRV: ptrTo(web1.ResourceVersion)}) // adopted from the synthetic ADDED
		items := b.list(prefix, k8s.ListOptions{}, b.s.Revision())
		initial(b, items)
		b.entry(k8s.Entry{SyncedRV: ptrTo(b.s.Revision())})
		finish(b, t, "kubernetes-136583-rv-from-synthetic-added.ndjson", items)
	}
	{ // kubernetes#59848: a restarted informer's first list, at
		// resourceVersion "0", came from a stale cache: back in time. The
		// API allows it ("0" is Any) and the issue is open, so only the
		// strict profile's StrictFreshStart names it (SPEC §5.8).
		b := start("kubernetes-59848", "kubernetes#59848")
		b.t.Header.Profile = "strict"
		stale := b.s.Revision()
		b.put(1, pods.Key("default", "web-0"), "v2")
		b.run().Entries[1] = k8s.Entry{Start: &k8s.StartEntry{Revision: b.s.Revision()}}
		items := b.list(prefix, k8s.ListOptions{ResourceVersion: "0"}, stale)
		initial(b, items)
		now := b.list(prefix, k8s.ListOptions{ResourceVersion: k8s.RV(stale)}, b.s.Revision())
		web := b.obj(pods.Key("default", "web-0"), 0)
		b.notify(k8s.Notification{Handler: 0, Type: k8s.OnUpdate, Old: &items[0], New: &web})
		finish(b, t, "kubernetes-59848-first-list-goes-back-in-time.ndjson", now)
	}
}
