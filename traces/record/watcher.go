package record

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// NewWatcher returns a clientv3.Watcher that sends every call to inner and
// records it — each watch's request and every response it gets, the
// stream it shares (one per context metadata, as clientv3 decides) and
// each progress request — in the way clientv3/namespace wraps a Watcher:
//
//	cli.Watcher = rec.NewWatcher(cli.Watcher)
//
// Its watches are recorded under one client of the trace. Each is created
// with clientv3.WithCreatedNotify, so that the trace knows when it started;
// the created response reaches the caller only if it asked for it.
func (r *Recorder) NewWatcher(inner clientv3.Watcher) clientv3.Watcher {
	return &recordingWatcher{rec: r, inner: inner, client: int(r.clients.Add(1))}
}

type recordingWatcher struct {
	rec    *Recorder
	inner  clientv3.Watcher
	client int
}

func (w *recordingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	op := clientv3.OpGet(key, opts...) // the public way to read the options
	req := watch.Request{Key: key, RangeEnd: string(op.RangeBytes()), StartRevision: op.Rev(), PrevKV: op.IsPrevKV(),
		NoPut: op.IsFilterPut(), NoDelete: op.IsFilterDelete(), ProgressNotify: op.IsProgressNotify(), Fragment: op.IsFragment()}
	wantCreated := op.IsCreatedNotify()
	id := int(w.rec.watches.Add(1))
	s := w.rec.stream(ctx, w.inner, w.client)
	w.rec.w.WatchStream(s.client, id, s.stream, w.rec.Now(), req)
	in := w.inner.Watch(ctx, key, append(opts, clientv3.WithCreatedNotify())...)
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for wr := range in {
			r := traces.WatchResponse{Response: fromWatchResponse(wr), Error: clientError(wr), Time: w.rec.Now()}
			w.rec.w.WatchResponseRecord(s.client, id, r)
			if wr.Created && !wantCreated && len(wr.Events) == 0 {
				continue
			}
			select {
			case out <- wr:
			case <-ctx.Done():
				// Keep recording what arrives until clientv3 closes the channel.
			}
		}
	}()
	return out
}

func (w *recordingWatcher) RequestProgress(ctx context.Context) error {
	s := w.rec.stream(ctx, w.inner, w.client)
	w.rec.w.ProgressRequest(traces.ProgressRequest{Client: s.client, Stream: s.stream, Time: w.rec.Now()})
	return w.inner.RequestProgress(ctx)
}

func (w *recordingWatcher) Close() error { return w.inner.Close() }
