package traces

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/watchspec/watchspec/model/watch"
)

// Writer writes a trace, one record per line, as the run goes. It is safe
// for concurrent use: records are written whole, in the order the calls are
// made. Errors are sticky: after the first failed write every method
// returns it. A record the writer's version cannot say (a version 2 field
// in a version 1 trace) is such an error.
type Writer struct {
	mu  sync.Mutex
	w   *bufio.Writer
	v   int // the version written
	err error
}

// NewWriter writes the header h and returns a writer for the records.
// Format is filled in, Version when 0 (the latest, [Version]), and Start
// defaults to now. h.Version may be 1 to write a version 1 trace.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	h.Format = Format
	if h.Version == 0 {
		h.Version = Version
	}
	if h.Start == "" {
		h.Start = time.Now().UTC().Format(time.RFC3339Nano)
	}
	tw := &Writer{w: bufio.NewWriterSize(w, 64<<10), v: h.Version}
	switch {
	case h.Version < 1 || h.Version > Version:
		return nil, fmt.Errorf("traces: cannot write format version %d (1 to %d)", h.Version, Version)
	case h.Version < 2 && h.BaseCompactRevision != nil:
		return nil, errors.New("traces: version 1 cannot record the header's base_compact_revision: write version 2")
	}
	tw.line(h)
	return tw, tw.err
}

// Version returns the format version w writes.
func (w *Writer) Version() int { return w.v }

func (w *Writer) line(v any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	b, err := json.Marshal(v)
	if err != nil {
		w.err = err
		return err
	}
	b = append(b, '\n')
	_, w.err = w.w.Write(b)
	return w.err
}

// fail makes err the writer's sticky error (unless it has one already).
func (w *Writer) fail(err error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
	return w.err
}

// need2 fails unless the writer writes version 2 or later.
func (w *Writer) need2(what string) error {
	if w.v < 2 {
		return w.fail(fmt.Errorf("traces: version 1 cannot record %s: write version 2", what))
	}
	return nil
}

// Op records a client operation. An operation whose outcome is unknown has
// a nil Response and an Error.
func (w *Writer) Op(op Op) error {
	if op.Serializable {
		if op.Request.Range == nil {
			return w.fail(errors.New("traces: only a range request may be serializable"))
		}
		if err := w.need2("a serializable range"); err != nil {
			return err
		}
	}
	client, call := op.Client, op.Call
	r := opRecord{Type: "op", Client: &client, Call: &call, Request: toWireRequest(op.Request, op.Serializable), Error: op.Error}
	if op.Response != nil || op.Return != 0 {
		ret := op.Return
		r.Return = &ret
	}
	if op.Response != nil {
		r.Response = toWireResponse(*op.Response)
	}
	return w.line(r)
}

// Watch records the creation of watch id by client at time t, on a stream
// not recorded.
func (w *Writer) Watch(client, id int, t int64, req watch.Request) error {
	return w.line(watchRecord{Type: "watch", Client: &client, Watch: &id, Time: &t, Request: toWireWatchRequest(req)})
}

// WatchStream records the creation of watch id by client at time t on the
// client's watch stream numbered stream (see [Watch.Stream]).
func (w *Writer) WatchStream(client, id, stream int, t int64, req watch.Request) error {
	if err := w.need2("a watch's stream"); err != nil {
		return err
	}
	return w.line(watchRecord{Type: "watch", Client: &client, Watch: &id, Stream: &stream, Time: &t, Request: toWireWatchRequest(req)})
}

// WatchResponse records a response received at time t on watch id of
// client, with its header revision (even 0).
func (w *Writer) WatchResponse(client, id int, t int64, resp watch.Response) error {
	return w.WatchResponseRecord(client, id, WatchResponse{Time: t, Response: resp})
}

// WatchResponseRecord records r, received on watch id of client: its Time
// and Response, and whether its revision is known (RevisionUnknown) and its
// Error (both version 2).
func (w *Writer) WatchResponseRecord(client, id int, r WatchResponse) error {
	switch {
	case r.RevisionUnknown && r.Response.Revision != 0:
		return w.fail(fmt.Errorf("traces: a watch response with an unknown revision has Revision %d", r.Response.Revision))
	case r.Error != "":
		if err := w.need2("a watch response's error"); err != nil {
			return err
		}
	}
	return w.line(watchResponseRecord{Type: "watch_response", Client: &client, Watch: &id, Time: &r.Time, Response: toWireWatchResp(r, w.v)})
}

// ProgressRequest records a client's Watcher.RequestProgress on one of its
// streams (p.Line is ignored).
func (w *Writer) ProgressRequest(p ProgressRequest) error {
	if err := w.need2("a progress request"); err != nil {
		return err
	}
	return w.line(progressRequestRecord{Type: "progress_request", Client: &p.Client, Stream: &p.Stream, Time: &p.Time})
}

// Annotation records something that happened to the system under test.
func (w *Writer) Annotation(a Annotation) error {
	t, end := a.Time, a.End
	r := annotationRecord{Type: "annotation", Time: &t, Tag: a.Tag, Text: a.Text}
	if end > t {
		r.End = &end
	}
	return w.line(r)
}

// Flush writes buffered records to the underlying writer.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = w.w.Flush()
	}
	return w.err
}

// Write writes a whole trace: its header and then every record, operations
// (key-value, then lease) first, then each watch with its responses, progress requests,
// annotations, and the Kubernetes records. (A recorder writes records as
// they happen instead; any order that creates a watch before its responses
// reads back the same.)
//
// It writes t.Header.Version when set, else the latest version ([Version]),
// except that a trace with an informer run (K8s) but no K8sInfo, or an
// untimed one, is written as version 1: only version 1 may leave the times
// of Kubernetes records unknown. Write fails when the version chosen cannot
// say what t holds.
func Write(out io.Writer, t *Trace) error {
	h := t.Header
	untimed := t.K8s != nil && (t.K8sInfo == nil || t.K8sInfo.Untimed)
	if h.Version == 0 {
		h.Version = Version
		if untimed {
			h.Version = 1
		}
	}
	if t.K8s != nil && t.K8sInfo != nil {
		if err := checkK8sInfo(t.K8s, t.K8sInfo); err != nil {
			return err
		}
	}
	if h.Version >= 2 && untimed {
		return errors.New("traces: version 2 times every Kubernetes record: set Trace.K8sInfo (or write version 1)")
	}
	w, err := NewWriter(out, h)
	if err != nil {
		return err
	}
	for _, op := range t.Ops {
		w.Op(op)
	}
	for _, op := range t.LeaseOps {
		w.LeaseOp(op)
	}
	for _, wa := range t.Watches {
		if wa.Stream != nil {
			w.WatchStream(wa.Client, wa.ID, *wa.Stream, wa.Time, wa.Request)
		} else {
			w.Watch(wa.Client, wa.ID, wa.Time, wa.Request)
		}
		for _, r := range wa.Responses {
			w.WatchResponseRecord(wa.Client, wa.ID, r)
		}
	}
	for _, p := range t.ProgressRequests {
		w.ProgressRequest(p)
	}
	for _, a := range t.Annotations {
		w.Annotation(a)
	}
	if t.K8s != nil {
		writeK8s(w, t.K8s, t.K8sInfo)
	}
	return w.Flush()
}

// WriteFile writes the whole trace t to the file path, replacing it; see
// [Write]. A path ending in ".gz" is compressed, as [ReadFile] expects.
func WriteFile(path string, t *Trace) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	var out io.Writer = f
	var zw *gzip.Writer
	if strings.HasSuffix(path, ".gz") {
		zw, _ = gzip.NewWriterLevel(f, gzip.BestCompression) // the level is valid
		out = zw
	}
	err = Write(out, t)
	if zw != nil && err == nil {
		err = zw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
