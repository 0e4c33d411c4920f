package watch_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/watchspec/watchspec/internal/scenario"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
)

// TestScenarios runs the scripted scenarios in testdata/scenarios: writes to
// the model store, watches, the responses a client received, and the
// violations the validator must report. Each file cites the SPEC section or
// upstream bug it covers. If this test fails, run
//
//	go test ./model/watch -run TestScenarios -update
//
// and read the diff; commit it only if you understand why the output changed.
func TestScenarios(t *testing.T) {
	scenario.Walk(t, "testdata/scenarios", func(t *testing.T) func(scenario.Command) string {
		e := &scenarioEnv{t: t, h: &kv.History{}, watches: make(map[string]*scenarioWatch)}
		return e.handle
	})
}

type scenarioEnv struct {
	t       *testing.T
	s       kv.State
	h       *kv.History
	watches map[string]*scenarioWatch
}

type scenarioWatch struct {
	req       watch.Request
	createdAt int64
	v         *watch.Validator
}

func (e *scenarioEnv) handle(c scenario.Command) string {
	switch c.Name {
	case "put":
		e.need(c, 2)
		return e.write(kv.Request{Put: &kv.PutRequest{Key: c.Args[0], Value: c.Args[1]}})
	case "delete":
		e.need(c, 1)
		return e.write(kv.Request{Delete: &kv.DeleteRequest{Key: c.Args[0], RangeEnd: rangeEnd(c)}})
	case "txn":
		var ops []kv.Op
		for _, a := range c.Args {
			kind, body, _ := strings.Cut(a, ":")
			switch kind {
			case "put":
				k, v, _ := strings.Cut(body, "=")
				ops = append(ops, kv.Op{Put: &kv.PutRequest{Key: k, Value: v}})
			case "delete":
				ops = append(ops, kv.Op{Delete: &kv.DeleteRequest{Key: body}})
			default:
				e.t.Fatalf("%s: txn op %q is neither put:k=v nor delete:k", c.Pos, a)
			}
		}
		return e.write(kv.Request{Txn: &kv.TxnRequest{Success: ops}})
	case "compact":
		e.need(c, 1)
		rev := e.int(c, c.Args[0])
		var resp kv.Response
		e.s, resp = kv.Step(e.s, kv.Request{Compact: &kv.CompactRequest{Revision: rev}})
		if resp.Err != nil {
			return "error: " + resp.Err.Error()
		}
		if err := e.h.Compact(rev); err != nil {
			e.t.Fatalf("%s: %v", c.Pos, err)
		}
		return "ok"
	case "watch":
		e.need(c, 1)
		req := watch.Request{
			Key: c.Arg("key", ""), RangeEnd: rangeEnd(c),
			StartRevision: e.int(c, c.Arg("start", "0")),
			NoPut:         c.Flag("noput"), NoDelete: c.Flag("nodelete"),
			PrevKV: c.Flag("prevkv"), ProgressNotify: c.Flag("progress"),
		}
		// One store: everything committed before the watch was requested
		// is applied by the server that registers it.
		cfg := watch.Config{CommittedBefore: e.int(c, c.Arg("committed", strconv.FormatInt(e.s.Revision(), 10)))}
		if c.Flag("strict") {
			cfg.Expect = watch.Expectations{MonotonicHeaders: true, StartAfterCreated: true}
		}
		switch c.Arg("bind", "all") {
		case "all":
		case "registration":
			cfg.Progress = watch.BindAfterRegistration
		case "none":
			cfg.Progress = watch.BindNone
		default:
			e.t.Fatalf("%s: bind=%s is not all, registration or none", c.Pos, c.Arg("bind", ""))
		}
		e.watches[c.Args[0]] = &scenarioWatch{req: req, createdAt: e.s.Revision(), v: watch.NewValidatorWith(e.h, req, cfg)}
		return fmt.Sprintf("created at rev=%d", e.s.Revision())
	case "canonical":
		w := e.watch(c)
		var lines []string
		for _, r := range watch.Canonical(e.h, w.req, w.createdAt) {
			lines = append(lines, formatResponse(r))
		}
		return strings.Join(lines, "\n")
	case "reregistered":
		e.watch(c).v.Reregistered()
		return "ok"
	case "recv":
		w := e.watch(c)
		var resps []watch.Response
		if len(c.Args) > 1 && c.Args[1] == "canonical" {
			resps = watch.Canonical(e.h, w.req, w.createdAt)
		} else {
			resps = []watch.Response{e.response(c, w)}
		}
		var lines []string
		for _, r := range resps {
			for _, v := range w.v.Observe(r) {
				lines = append(lines, v.String())
			}
		}
		if len(lines) == 0 {
			return "ok"
		}
		return strings.Join(lines, "\n")
	}
	e.t.Fatalf("%s: unknown command %q", c.Pos, c.Name)
	return ""
}

func (e *scenarioEnv) need(c scenario.Command, n int) {
	if len(c.Args) < n {
		e.t.Fatalf("%s: %s needs %d arguments", c.Pos, c.Name, n)
	}
}

func (e *scenarioEnv) int(c scenario.Command, s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		e.t.Fatalf("%s: %q is not a number", c.Pos, s)
	}
	return n
}

func (e *scenarioEnv) watch(c scenario.Command) *scenarioWatch {
	e.need(c, 1)
	w, ok := e.watches[c.Args[0]]
	if !ok {
		e.t.Fatalf("%s: no watch %q", c.Pos, c.Args[0])
	}
	return w
}

func (e *scenarioEnv) write(req kv.Request) string {
	var resp kv.Response
	e.s, resp = kv.Step(e.s, req)
	if resp.Err != nil {
		return "error: " + resp.Err.Error()
	}
	if c, ok := e.s.LastCommit(); ok && c.Revision == resp.Revision && c.Revision > e.h.Head() {
		if err := e.h.Append(c); err != nil {
			e.t.Fatal(err)
		}
	}
	if resp.Delete != nil {
		return fmt.Sprintf("rev=%d deleted=%d", resp.Revision, resp.Delete.Deleted)
	}
	return fmt.Sprintf("rev=%d", resp.Revision)
}

// rangeEnd reads the range end of a command: end=<e>, or the flags prefix / fromkey.
func rangeEnd(c scenario.Command) string {
	key := c.Arg("key", "")
	if key == "" && len(c.Args) > 0 && !strings.Contains(c.Args[0], "=") {
		key = c.Args[0]
	}
	switch {
	case c.Flag("prefix"):
		return kv.PrefixEnd(key)
	case c.Flag("fromkey"):
		return "\x00"
	}
	return c.Arg("end", "")
}

// response builds the response of a recv command:
//
//	recv w created [rev=N]
//	recv w progress [rev=N]
//	recv w cancel [compact=N] [rev=N]
//	recv w events EV... [rev=N]
//
// (the header revision of events defaults to the larger of the watch's
// creation revision and the events' revisions)
// where EV is key@rev, the committed event (with the PrevKV the watch asked
// for), optionally followed by {mod,...} overriding value=, create=,
// version=, type=put|delete, prev=none or prev=REV (the key at REV).
func (e *scenarioEnv) response(c scenario.Command, w *scenarioWatch) watch.Response {
	e.need(c, 2)
	var r watch.Response
	switch c.Args[1] {
	case "created":
		r = watch.Response{Created: true, Revision: w.createdAt}
	case "progress":
		r = watch.Response{Revision: e.s.Revision()}
	case "cancel":
		r = watch.Response{Canceled: true, CompactRevision: e.int(c, c.Arg("compact", "0"))}
		if r.CompactRevision == 0 {
			r.Revision = e.s.Revision()
		}
	case "events":
		// By default the header revision is what etcd would send: never below
		// the creation revision, nor below the events.
		r.Revision = w.createdAt
		for _, a := range c.Args[2:] {
			if strings.HasPrefix(a, "rev=") {
				continue
			}
			ev := e.event(c, w, a)
			r.Events = append(r.Events, ev)
			r.Revision = max(r.Revision, ev.KV.ModRevision)
		}
	default:
		e.t.Fatalf("%s: unknown response kind %q", c.Pos, c.Args[1])
	}
	if s := c.Arg("rev", ""); s != "" {
		r.Revision = e.int(c, s)
	}
	return r
}

func (e *scenarioEnv) event(c scenario.Command, w *scenarioWatch, spec string) kv.Event {
	spec, mods, _ := strings.Cut(spec, "{")
	mods = strings.TrimSuffix(mods, "}")
	key, revText, ok := strings.Cut(spec, "@")
	if !ok {
		e.t.Fatalf("%s: event %q is not key@rev", c.Pos, spec)
	}
	rev := e.int(c, revText)
	ev := kv.Event{Type: kv.Put, KV: kv.KeyValue{Key: key, Value: "?", ModRevision: rev, CreateRevision: rev, Version: 1}}
	if cm, ok := e.h.Commit(rev); ok {
		for _, x := range cm.Events {
			if x.KV.Key == key {
				ev = x
				break
			}
		}
	}
	// A committed event carries its PrevKV; deliver it only as the watch asked.
	if !w.req.PrevKV || rev-1 < e.h.CompactRevision() {
		ev.PrevKV = nil
	}
	for _, m := range strings.Split(mods, ",") {
		if m == "" {
			continue
		}
		k, v, _ := strings.Cut(m, "=")
		switch k {
		case "value":
			ev.KV.Value = v
		case "create":
			ev.KV.CreateRevision = e.int(c, v)
		case "version":
			ev.KV.Version = e.int(c, v)
		case "type":
			if v == "delete" {
				ev.Type, ev.KV = kv.Delete, kv.KeyValue{Key: key, ModRevision: rev}
			} else {
				ev.Type = kv.Put
			}
		case "prev":
			if v == "none" {
				ev.PrevKV = nil
				break
			}
			p, ok := e.s.Get(key, e.int(c, v))
			if !ok {
				e.t.Fatalf("%s: %q did not exist at revision %s", c.Pos, key, v)
			}
			ev.PrevKV = &p
		default:
			e.t.Fatalf("%s: unknown event modifier %q", c.Pos, k)
		}
	}
	return ev
}

func formatResponse(r watch.Response) string {
	switch {
	case r.Created && r.Canceled:
		return fmt.Sprintf("created canceled rev=%d reason=%q", r.Revision, r.CancelReason)
	case r.Created:
		return fmt.Sprintf("created rev=%d", r.Revision)
	case r.CompactRevision != 0:
		return fmt.Sprintf("cancel compact=%d rev=%d", r.CompactRevision, r.Revision)
	case r.Canceled:
		return fmt.Sprintf("cancel rev=%d", r.Revision)
	case r.IsProgressNotify():
		return fmt.Sprintf("progress rev=%d", r.Revision)
	}
	parts := []string{fmt.Sprintf("events rev=%d:", r.Revision)}
	for _, e := range r.Events {
		parts = append(parts, formatEvent(e))
	}
	return strings.Join(parts, " ")
}

func formatEvent(e kv.Event) string {
	s := fmt.Sprintf("%s@%d", e.KV.Key, e.KV.ModRevision)
	if e.Type == kv.Delete {
		s += "{delete"
	} else {
		s += fmt.Sprintf("{put value=%s create=%d version=%d", e.KV.Value, e.KV.CreateRevision, e.KV.Version)
	}
	if e.PrevKV != nil {
		s += fmt.Sprintf(" prev=%s@%d", e.PrevKV.Value, e.PrevKV.ModRevision)
	}
	return s + "}"
}
