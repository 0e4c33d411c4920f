// Package record drives an etcd-v3 endpoint through the real client
// (go.etcd.io/etcd/client/v3) and records everything sent and received in
// watchspec's trace format, so that any etcd-compatible store can be checked
// with `watchspec check`.
//
// Requests and responses are expressed in the model's terms (kv.Request,
// watch.Request), translated to and from clientv3 here. A response the
// server gave — including the errors the model knows, such as a read of a
// compacted revision — is recorded as the operation's outcome; any other
// failure (a timeout, a lost connection) leaves the outcome unknown: the
// operation may or may not have taken effect, and the checker allows both.
//
// The trace says what a checker needs to judge the client's view of real
// use (trace format version 2): which watches share one clientv3 watch
// stream ([Client.Watch]) and when the client asked a stream for progress
// ([Client.RequestProgress]) — etcd answers a stream, and clientv3 hands
// the answer to every watch on it —, which reads were serializable
// ([Client.ReadSerializable]), and which watch ended by a client-side error.
// Lease operations are recorded through [Recorder.NewLease], which wraps a
// clientv3.Lease; a put names its lease in kv.PutRequest.Lease.
// The header (the store's base revision and the compaction in force, see
// traces.Header) is the caller's to write.
//
// To start: write the header with traces.NewWriter, make a [Recorder] with
// [New], take a [Client] per clientv3 client with [Recorder.Client], and
// send every request through [Client.Do] and every watch through
// [Client.Watch]; then [Recorder.Flush]. Package conform is a complete
// user of it. Code that already has a client is recorded unchanged by
// wrapping its KV and Watcher, as clientv3/namespace does:
// cli.KV = rec.NewKV(cli.KV) and cli.Watcher = rec.NewWatcher(cli.Watcher)
// ([Recorder.NewKV], [Recorder.NewWatcher]).
// A client-go informer is recorded by package traces/record/kuberecord.
//
// # What the checker relies on
//
// A trace is judged against the store's whole history, so a recording must
// give the checker (package linearizability) what it assumes:
//
//   - every writer is recorded: revisions are store-wide, and a write by a
//     client outside the recording shows up as a revision nobody made,
//     which no linearization explains;
//   - the base revision is captured: the header's BaseRevision (and
//     BaseCompactRevision) is the store as it was before the first recorded
//     request — read it with a Get before recording starts, as conform does;
//   - values are unique when outcomes may be unknown: a write whose client
//     never learnt the outcome (a timeout) is found in the history by its
//     value (Header.UniqueValues), so no two writes may put the same value.
package record

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/lease"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// Recorder hands out recording clients that share one trace and one clock.
// It is safe for concurrent use.
type Recorder struct {
	w       *traces.Writer
	start   time.Time
	clients atomic.Int64
	watches atomic.Int64

	mu      sync.Mutex
	streams map[streamKey]streamID
}

// streamKey identifies a clientv3 watch stream as clientv3 does: one per
// Watcher and outgoing metadata of the context (client/v3/watch.go,
// streamKeyFromCtx).
type streamKey struct {
	w  clientv3.Watcher
	md string
}

// streamID is where a stream is in the trace: the client its watches are
// recorded under (the first that used it) and its number.
type streamID struct{ client, stream int }

// stream returns the trace's name for the stream of w that ctx selects; a
// stream first used by client is recorded under client.
func (r *Recorder) stream(ctx context.Context, w clientv3.Watcher, client int) streamID {
	key := streamKey{w: w}
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		key.md = fmt.Sprintf("%+v", map[string][]string(md))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.streams == nil {
		r.streams = map[streamKey]streamID{}
	}
	id, ok := r.streams[key]
	if !ok {
		id = streamID{client: client, stream: len(r.streams)}
		r.streams[key] = id
	}
	return id
}

// New returns a recorder writing to w; times in the trace count from now.
func New(w *traces.Writer) *Recorder {
	return &Recorder{w: w, start: time.Now()}
}

// Now returns nanoseconds since the recorder started, from the monotonic clock.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Annotate records something that happened to the system under test.
func (r *Recorder) Annotate(tag, text string, start int64) error {
	return r.w.Annotation(traces.Annotation{Time: start, End: r.Now(), Tag: tag, Text: text})
}

// Client is one logical client of the trace. Its key-value operations are
// not safe for concurrent use: a client issues one operation at a time, as
// porcupine's clients do. After an operation whose outcome is unknown, the
// client continues under a new id, since that operation may still be in
// flight. Watch and RequestProgress may be called concurrently with
// anything.
type Client struct {
	rec *Recorder
	c   clientv3.KV
	id  int
	// first is the id the client started with: the id its watch streams
	// are recorded under.
	first int
}

// Client returns a recording client that talks through c.
func (r *Recorder) Client(c *clientv3.Client) *Client {
	id := int(r.clients.Add(1))
	return &Client{rec: r, c: c, id: id, first: id}
}

// ID returns the client's current id in the trace.
func (c *Client) ID() int { return c.id }

// Do sends req and records it with its outcome. It returns the response
// when the server answered (possibly with an error the model knows, in
// Response.Err) and a non-nil error when the outcome is unknown.
func (c *Client) Do(ctx context.Context, req kv.Request) (kv.Response, error) {
	return c.record(ctx, req, false)
}

// ReadSerializable sends a serializable read (clientv3.WithSerializable):
// the member that gets it answers from its own state, without asking the
// leader, so the answer may be behind what completed before; it is recorded
// as serializable (traces.Op.Serializable), and the checker judges it by
// etcd's rule for such reads. Otherwise it is [Client.Do].
func (c *Client) ReadSerializable(ctx context.Context, req kv.RangeRequest) (kv.Response, error) {
	return c.record(ctx, kv.Request{Range: &req}, true)
}

func (c *Client) record(ctx context.Context, req kv.Request, serializable bool) (kv.Response, error) {
	call := c.rec.Now()
	resp, err := c.do(ctx, req, serializable)
	return c.log(req, serializable, call, c.rec.Now(), resp, err)
}

// log records req, sent at call and answered at ret with resp or err, and
// returns them as the caller sees them: an error the model knows becomes the
// response's Err.
func (c *Client) log(req kv.Request, serializable bool, call, ret int64, resp kv.Response, err error) (kv.Response, error) {
	op := traces.Op{Client: c.id, Call: call, Return: ret, Request: req, Serializable: serializable}
	if err != nil {
		if known := modelError(err); known != nil {
			resp, err = kv.Response{Err: known}, nil
		}
	}
	if err != nil {
		op.Error = err.Error()
		c.id = int(c.rec.clients.Add(1))
	} else {
		op.Response = &resp
	}
	if werr := c.rec.w.Op(op); werr != nil && err == nil {
		return resp, werr
	}
	return resp, err
}

// modelError maps the server's errors that the model knows to the model's
// error values; it returns nil for anything else.
func modelError(err error) error {
	desc := rpctypes.ErrorDesc(err)
	for _, e := range []struct {
		server error
		model  error
	}{
		{rpctypes.ErrGRPCCompacted, kv.ErrCompacted},
		{rpctypes.ErrGRPCFutureRev, kv.ErrFutureRev},
		{rpctypes.ErrGRPCEmptyKey, kv.ErrEmptyKey},
		{rpctypes.ErrGRPCDuplicateKey, kv.ErrDuplicateKey},
		{rpctypes.ErrGRPCKeyNotFound, kv.ErrKeyNotFound},
		{rpctypes.ErrGRPCLeaseNotFound, lease.ErrNotFound}, // a put naming a lease that is gone (lease.go)
	} {
		if desc == rpctypes.ErrorDesc(e.server) {
			return e.model
		}
	}
	return nil
}

func (c *Client) do(ctx context.Context, req kv.Request, serializable bool) (kv.Response, error) {
	switch {
	case req.Compact != nil:
		r, err := c.c.Compact(ctx, req.Compact.Revision)
		if err != nil {
			return kv.Response{}, err
		}
		return kv.Response{Revision: r.Header.Revision, Compact: &kv.CompactResponse{}}, nil
	case req.Txn != nil:
		var cmps []clientv3.Cmp
		for _, cmp := range req.Txn.Compare {
			cmps = append(cmps, toCmp(cmp))
		}
		r, err := c.c.Txn(ctx).If(cmps...).Then(toOps(req.Txn.Success)...).Else(toOps(req.Txn.Failure)...).Commit()
		if err != nil {
			return kv.Response{}, err
		}
		return fromTxnResponse(r), nil
	}
	var op clientv3.Op
	switch {
	case req.Range != nil && serializable:
		op = toOp(kv.Op{Range: req.Range}, clientv3.WithSerializable())
	case req.Range != nil:
		op = toOp(kv.Op{Range: req.Range})
	case req.Put != nil:
		op = toOp(kv.Op{Put: req.Put})
	case req.Delete != nil:
		op = toOp(kv.Op{Delete: req.Delete})
	default:
		return kv.Response{Err: kv.ErrInvalidRequest}, nil
	}
	r, err := c.c.Do(ctx, op)
	if err != nil {
		return kv.Response{}, err
	}
	return fromOpResponse(r), nil
}

// fromTxnResponse is a transaction's response in the model's terms.
func fromTxnResponse(r *clientv3.TxnResponse) kv.Response {
	t := &kv.TxnResponse{Succeeded: r.Succeeded}
	for _, o := range r.Responses {
		var or kv.OpResponse
		switch {
		case o.GetResponseRange() != nil:
			rr := o.GetResponseRange()
			or.Range = &kv.RangeResponse{KVs: fromKVs(rr.Kvs), More: rr.More, Count: rr.Count}
		case o.GetResponsePut() != nil:
			or.Put = &kv.PutResponse{PrevKV: fromKVPtr(o.GetResponsePut().PrevKv)}
		case o.GetResponseDeleteRange() != nil:
			d := o.GetResponseDeleteRange()
			or.Delete = &kv.DeleteResponse{Deleted: d.Deleted, PrevKVs: fromKVs(d.PrevKvs)}
		}
		t.Responses = append(t.Responses, or)
	}
	return kv.Response{Revision: r.Header.Revision, Txn: t}
}

// fromOpResponse is a get's, put's or delete's response in the model's terms.
func fromOpResponse(r clientv3.OpResponse) kv.Response {
	switch {
	case r.Get() != nil:
		g := r.Get()
		return kv.Response{Revision: g.Header.Revision, Range: &kv.RangeResponse{KVs: fromKVs(g.Kvs), More: g.More, Count: g.Count}}
	case r.Put() != nil:
		return kv.Response{Revision: r.Put().Header.Revision, Put: &kv.PutResponse{PrevKV: fromKVPtr(r.Put().PrevKv)}}
	case r.Txn() != nil:
		return fromTxnResponse(r.Txn())
	default:
		d := r.Del()
		return kv.Response{Revision: d.Header.Revision, Delete: &kv.DeleteResponse{Deleted: d.Deleted, PrevKVs: fromKVs(d.PrevKvs)}}
	}
}

func toOps(ops []kv.Op) []clientv3.Op {
	var out []clientv3.Op
	for _, o := range ops {
		out = append(out, toOp(o))
	}
	return out
}

func toOp(o kv.Op, extra ...clientv3.OpOption) clientv3.Op {
	switch {
	case o.Range != nil:
		r := o.Range
		opts := append([]clientv3.OpOption{clientv3.WithRev(r.Revision), clientv3.WithLimit(r.Limit)}, extra...)
		if r.RangeEnd != "" {
			opts = append(opts, clientv3.WithRange(r.RangeEnd))
		}
		if r.CountOnly {
			opts = append(opts, clientv3.WithCountOnly())
		}
		if r.KeysOnly {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		return clientv3.OpGet(r.Key, opts...)
	case o.Put != nil:
		var opts []clientv3.OpOption
		if o.Put.PrevKV {
			opts = append(opts, clientv3.WithPrevKV())
		}
		if o.Put.Lease != 0 {
			opts = append(opts, clientv3.WithLease(clientv3.LeaseID(o.Put.Lease)))
		}
		return clientv3.OpPut(o.Put.Key, o.Put.Value, opts...)
	default:
		d := o.Delete
		var opts []clientv3.OpOption
		if d.RangeEnd != "" {
			opts = append(opts, clientv3.WithRange(d.RangeEnd))
		}
		if d.PrevKV {
			opts = append(opts, clientv3.WithPrevKV())
		}
		return clientv3.OpDelete(d.Key, opts...)
	}
}

func toCmp(c kv.Compare) clientv3.Cmp {
	result := map[kv.CompareResult]string{kv.CompareEqual: "=", kv.CompareNotEqual: "!=", kv.CompareLess: "<", kv.CompareGreater: ">"}[c.Result]
	switch c.Target {
	case kv.TargetValue:
		return clientv3.Compare(clientv3.Value(c.Key), result, c.Value)
	case kv.TargetVersion:
		return clientv3.Compare(clientv3.Version(c.Key), result, c.Number)
	case kv.TargetCreateRevision:
		return clientv3.Compare(clientv3.CreateRevision(c.Key), result, c.Number)
	default:
		return clientv3.Compare(clientv3.ModRevision(c.Key), result, c.Number)
	}
}

func fromKV(k *mvccpb.KeyValue) kv.KeyValue {
	return kv.KeyValue{Key: string(k.Key), Value: string(k.Value), CreateRevision: k.CreateRevision, ModRevision: k.ModRevision, Version: k.Version, Lease: k.Lease}
}

func fromKVs(ks []*mvccpb.KeyValue) []kv.KeyValue {
	var out []kv.KeyValue
	for _, k := range ks {
		out = append(out, fromKV(k))
	}
	return out
}

func fromKVPtr(k *mvccpb.KeyValue) *kv.KeyValue {
	if k == nil {
		return nil
	}
	v := fromKV(k)
	return &v
}

// Watch is a recorded watch: every response the client receives on it is
// written to the trace before it is handed on.
type Watch struct {
	// ID is the watch's id in the trace.
	ID int
	// C delivers the responses, translated to the model's terms; it is
	// closed when the watch ends (a cancel, an error, or ctx done).
	C <-chan watch.Response
}

// Watch creates a watch through w (the Watcher of any clientv3 client) and
// records its creation and every response. The created response is always
// requested (clientv3's WithCreatedNotify), since its header revision
// defines where a watch from "now" starts.
//
// clientv3 sends every watch of one Watcher whose ctx carries the same
// outgoing metadata (clientv3.WithRequireLeader, say) on one gRPC stream;
// the trace records which watches share a stream, under the client that
// first used it (traces.Watch.Stream): watches on one stream share its
// progress notifications. A response clientv3 made up when the stream
// failed for good (no leader, the client closed) is recorded with its
// error (traces.WatchResponse.Error).
func (c *Client) Watch(ctx context.Context, w clientv3.Watcher, req watch.Request) *Watch {
	opts := []clientv3.OpOption{clientv3.WithRev(req.StartRevision), clientv3.WithCreatedNotify()}
	if req.RangeEnd != "" {
		opts = append(opts, clientv3.WithRange(req.RangeEnd))
	}
	if req.PrevKV {
		opts = append(opts, clientv3.WithPrevKV())
	}
	if req.NoPut {
		opts = append(opts, clientv3.WithFilterPut())
	}
	if req.NoDelete {
		opts = append(opts, clientv3.WithFilterDelete())
	}
	if req.ProgressNotify {
		opts = append(opts, clientv3.WithProgressNotify())
	}
	if req.Fragment {
		opts = append(opts, clientv3.WithFragment())
	}
	id := int(c.rec.watches.Add(1))
	s := c.rec.stream(ctx, w, c.first)
	c.rec.w.WatchStream(s.client, id, s.stream, c.rec.Now(), req)
	in := w.Watch(ctx, req.Key, opts...)
	out := make(chan watch.Response)
	go func() {
		defer close(out)
		for wr := range in {
			r := traces.WatchResponse{Response: fromWatchResponse(wr), Error: clientError(wr)}
			r.Time = c.rec.Now()
			c.rec.w.WatchResponseRecord(s.client, id, r)
			select {
			case out <- r.Response:
			case <-ctx.Done():
				// Keep recording what arrives until clientv3 closes the channel.
			}
		}
	}()
	return &Watch{ID: id, C: out}
}

// RequestProgress asks the watch stream that ctx selects on w for a
// progress notification (clientv3's Watcher.RequestProgress) and records
// the request (traces.ProgressRequest) before sending it. etcd answers
// once, when every watch of the stream is synced, with a response clientv3
// hands to every watch of the stream — including one created after etcd
// computed it.
func (c *Client) RequestProgress(ctx context.Context, w clientv3.Watcher) error {
	s := c.rec.stream(ctx, w, c.first)
	c.rec.w.ProgressRequest(traces.ProgressRequest{Client: s.client, Stream: s.stream, Time: c.rec.Now()})
	return w.RequestProgress(ctx)
}

// clientError returns the error of a response clientv3 made up when it
// ended a watch on its side (WatchResponse.Err of a close: no leader, the
// client closed), or "" for a response the server sent (its cancels
// included: a compaction, a cancel with a reason, or none).
func clientError(wr clientv3.WatchResponse) string {
	if !wr.Canceled || wr.CompactRevision != 0 || wr.CancelReason != "" || wr.Header.GetRevision() != 0 {
		return ""
	}
	err := wr.Err()
	if err == nil || errors.Is(err, rpctypes.ErrFutureRev) {
		return ""
	}
	return err.Error()
}

func fromWatchResponse(wr clientv3.WatchResponse) watch.Response {
	r := watch.Response{Revision: wr.Header.GetRevision(), Created: wr.Created, Canceled: wr.Canceled,
		CompactRevision: wr.CompactRevision, CancelReason: wr.CancelReason}
	for _, e := range wr.Events {
		ev := kv.Event{Type: kv.Put, KV: fromKV(e.Kv), PrevKV: fromKVPtr(e.PrevKv)}
		if e.Type == mvccpb.DELETE {
			ev.Type = kv.Delete
		}
		r.Events = append(r.Events, ev)
	}
	return r
}

// Flush flushes the trace.
func (r *Recorder) Flush() error { return r.w.Flush() }
