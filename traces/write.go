package traces

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
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
// returns it.
type Writer struct {
	mu  sync.Mutex
	w   *bufio.Writer
	err error
}

// NewWriter writes the header h (Format and Version are filled in; Start
// defaults to now) and returns a writer for the records.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	h.Format, h.Version = Format, Version
	if h.Start == "" {
		h.Start = time.Now().UTC().Format(time.RFC3339Nano)
	}
	tw := &Writer{w: bufio.NewWriterSize(w, 64<<10)}
	tw.line(h)
	return tw, tw.err
}

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

// Op records a client operation. An operation whose outcome is unknown has
// a nil Response and an Error.
func (w *Writer) Op(op Op) error {
	client, call := op.Client, op.Call
	r := opRecord{Type: "op", Client: &client, Call: &call, Request: toWireRequest(op.Request), Error: op.Error}
	if op.Response != nil || op.Return != 0 {
		ret := op.Return
		r.Return = &ret
	}
	if op.Response != nil {
		r.Response = toWireResponse(*op.Response)
	}
	return w.line(r)
}

// Watch records the creation of watch id by client at time t.
func (w *Writer) Watch(client, id int, t int64, req watch.Request) error {
	return w.line(watchRecord{Type: "watch", Client: &client, Watch: &id, Time: &t, Request: toWireWatchRequest(req)})
}

// WatchResponse records a response received at time t on watch id of client.
func (w *Writer) WatchResponse(client, id int, t int64, resp watch.Response) error {
	return w.line(watchResponseRecord{Type: "watch_response", Client: &client, Watch: &id, Time: &t, Response: toWireWatchResp(resp)})
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
// first, then each watch with its responses, then annotations. (A recorder
// writes records as they happen instead; any order that creates a watch
// before its responses reads back the same.)
func Write(out io.Writer, t *Trace) error {
	w, err := NewWriter(out, t.Header)
	if err != nil {
		return err
	}
	for _, op := range t.Ops {
		w.Op(op)
	}
	for _, wa := range t.Watches {
		w.Watch(wa.Client, wa.ID, wa.Time, wa.Request)
		for _, r := range wa.Responses {
			w.WatchResponse(wa.Client, wa.ID, r.Time, r.Response)
		}
	}
	for _, a := range t.Annotations {
		w.Annotation(a)
	}
	if t.K8s != nil {
		writeK8s(w, t.K8s)
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
