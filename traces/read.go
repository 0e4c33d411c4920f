package traces

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxLine bounds the length of one line of a trace (64 MiB): a longer line is
// reported as malformed rather than read into memory.
const MaxLine = 64 << 20

// ReadFile reads the trace at path; see [Read]. It holds nothing of the
// file once it returns, so a tool checking many traces can read and check
// them one at a time. A gzip-compressed file is decompressed, whatever its
// name; a name ending in ".gz" must hold gzip data.
func ReadFile(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	if strings.HasSuffix(path, ".gz") && !isGzip(br) {
		return nil, fmt.Errorf("%s: not gzip data, though the name ends in .gz", path)
	}
	return Read(br, path)
}

// gzipMagic starts every gzip stream (RFC 1952); no JSON text starts so.
var gzipMagic = []byte{0x1f, 0x8b}

func isGzip(br *bufio.Reader) bool {
	b, _ := br.Peek(2)
	return bytes.Equal(b, gzipMagic)
}

// gzipError is an error of the gzip stream a trace is read through.
type gzipError struct{ err error }

func (e *gzipError) Error() string {
	if errors.Is(e.err, io.ErrUnexpectedEOF) {
		return "corrupt gzip data: the stream is truncated"
	}
	return "corrupt gzip data: " + e.err.Error()
}

func (e *gzipError) Unwrap() error { return e.err }

// gzipSource marks the errors of a gzip stream as such.
type gzipSource struct{ zr *gzip.Reader }

func (g gzipSource) Read(p []byte) (int, error) {
	n, err := g.zr.Read(p)
	if err != nil && err != io.EOF {
		err = &gzipError{err}
	}
	return n, err
}

// Read reads a whole trace from r, of any version this package reads (1
// and 2). name is used in messages and as the trace's Name. A
// gzip-compressed stream is decompressed. A malformed trace fails with an
// error "name:line: what is wrong"; Read never panics on malformed input.
//
// Beyond the JSON shapes, Read checks what a checker relies on: the header
// comes first and names this format and a version it reads; the file is
// UTF-8; every operation sets exactly one kind of request and its response
// answers that kind; times, revisions, versions and counts are not
// negative; a return is not before its call; a watch's (client, watch) pair
// is unique and each watch response follows its watch; and, in version 2,
// that times do not go backwards where the format promises an order
// (docs/TRACE_FORMAT.md, "Order").
//
// A damaged gzip stream fails as "corrupt gzip data", even when the damage
// first shows as a line that does not parse.
func Read(r io.Reader, name string) (*Trace, error) {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 64<<10)
	}
	if !isGzip(br) {
		return read(br, name)
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("%s:1: %v", name, &gzipError{err})
	}
	defer zr.Close()
	t, err := read(bufio.NewReaderSize(gzipSource{zr}, 64<<10), name)
	var gz *gzipError
	var le *lineError
	if errors.As(err, &le) && !errors.As(err, &gz) {
		// Damaged data may inflate to garbage before the stream's
		// checksum fails: if the rest of the stream is corrupt, that is
		// the error to report, not the garbage it made.
		if _, derr := io.Copy(io.Discard, zr); derr != nil {
			return nil, &lineError{name, le.line, fmt.Errorf("%v (found reading on after this line failed: %v)", &gzipError{derr}, le.err)}
		}
	}
	return t, err
}

// lineError is what is wrong with one line of a trace.
type lineError struct {
	name string
	line int
	err  error
}

func (e *lineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.name, e.line, e.err) }
func (e *lineError) Unwrap() error { return e.err }

func read(br *bufio.Reader, name string) (*Trace, error) {
	rd := &reader{t: &Trace{Name: name}, watches: map[[2]int]*Watch{}}
	for lineNo := 1; ; lineNo++ {
		line, err := readLine(br)
		if err == io.EOF {
			if lineNo == 1 {
				return nil, fmt.Errorf("%s:1: empty trace: the first line must be the header", name)
			}
			return rd.t, nil
		}
		if err != nil {
			return nil, &lineError{name, lineNo, err}
		}
		if !utf8.Valid(line) {
			return nil, &lineError{name, lineNo, fmt.Errorf(`invalid UTF-8 at byte %d: a trace is UTF-8 JSON; write bytes that are not UTF-8 as {"base64": "..."}`,
				invalidUTF8At(line))}
		}
		if len(bytes.TrimSpace(line)) == 0 {
			if lineNo == 1 {
				return nil, fmt.Errorf("%s:1: the first line must be the header, not a blank line", name)
			}
			continue
		}
		if lineNo == 1 {
			if err := readHeader(line, &rd.t.Header); err != nil {
				return nil, &lineError{name, 1, err}
			}
			rd.v = rd.t.Header.Version
			continue
		}
		if err := rd.record(line, lineNo); err != nil {
			return nil, &lineError{name, lineNo, err}
		}
	}
}

// invalidUTF8At returns the offset of the first byte of b that is not part
// of valid UTF-8.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// readLine returns the next line without its "\n" or "\r\n". A last line
// without a newline is a line; an error of the source (a damaged gzip
// stream) is returned rather than the partial line it cut.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > MaxLine {
			return nil, fmt.Errorf("line longer than %d bytes", MaxLine)
		}
		line = append(line, chunk...)
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && len(line) > 0, err == nil:
			line = bytes.TrimSuffix(line, []byte("\n"))
			return bytes.TrimSuffix(line, []byte("\r")), nil
		default:
			return nil, err
		}
	}
}

// strict decodes one JSON object, rejecting unknown fields. (Trailing data
// was already rejected when the record's type was read.)
func strict(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return describeJSONError(err)
	}
	return nil
}

func describeJSONError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("invalid JSON at byte %d: %v", syn.Offset, err)
	case errors.As(err, &typ):
		return fmt.Errorf("field %q: expected %s, found a JSON %s", typ.Field, typ.Type, typ.Value)
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return errors.New("truncated JSON")
	}
	return fmt.Errorf("invalid record: %v", err)
}

func readHeader(line []byte, h *Header) error {
	var probe struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(line, &probe); err != nil {
		return fmt.Errorf("the header is not a JSON object: %v", describeJSONError(err))
	}
	if probe.Format != Format {
		return fmt.Errorf("the header's format is %q, not %q: is this a watchspec trace?", probe.Format, Format)
	}
	if probe.Version < 1 || probe.Version > Version {
		return fmt.Errorf("trace format version %d is not supported (this watchspec reads versions 1 to %d)", probe.Version, Version)
	}
	if err := strict(line, h); err != nil {
		return fmt.Errorf("header: %v", err)
	}
	if h.System == "" {
		return errors.New(`header: "system" must name what produced the trace`)
	}
	if _, err := time.Parse(time.RFC3339Nano, h.Start); err != nil {
		return fmt.Errorf(`header: "start" must be an RFC 3339 time: %v`, err)
	}
	if err := notNegative("header ", "base_revision", h.BaseRevision); err != nil {
		return err
	}
	if c := h.BaseCompactRevision; c != nil {
		switch {
		case h.Version < 2:
			return errors.New(`header: "base_compact_revision" is new in version 2, and the header says version 1`)
		case *c < -1:
			return fmt.Errorf(`header: "base_compact_revision" is %d: −1 (never compacted) or a compaction revision, or leave it out when not known`, *c)
		case *c > max(h.BaseRevision, 1):
			return fmt.Errorf(`header: "base_compact_revision" %d is above "base_revision" %d: a store is never compacted beyond its revision`, *c, h.BaseRevision)
		}
	}
	return nil
}

func need[T any](p *T, field string) (T, error) {
	if p == nil {
		var zero T
		return zero, fmt.Errorf("missing %q", field)
	}
	return *p, nil
}

// needTime returns a required time, which must not be negative.
// clientTimes reads the "client", "call" and "return" fields that an
// operation's record and a lease record share: a client and a call time are
// required, a return (absent while the outcome is unknown) is not before the call.
func clientTimes(client *int, call, ret *int64) (c int, callT, retT int64, err error) {
	if c, err = need(client, "client"); err != nil {
		return
	}
	if callT, err = needTime(call, "call"); err != nil {
		return
	}
	if ret != nil {
		retT = *ret
		if retT < callT {
			err = fmt.Errorf("\"return\" (%d) is before \"call\" (%d)", retT, callT)
		}
	}
	return
}

func needTime(p *int64, field string) (int64, error) {
	t, err := need(p, field)
	if err == nil {
		err = nonNegative(t, field)
	}
	return t, err
}

func nonNegative(v int64, field string) error {
	if v < 0 {
		return fmt.Errorf("%q is negative (%d): times are nanoseconds since the start", field, v)
	}
	return nil
}

// reader is the state of reading one trace: what later records are checked
// against.
type reader struct {
	t       *Trace
	v       int // the trace's version
	watches map[[2]int]*Watch
	// ended maps a watch to the line of the response whose error ended it.
	ended map[*Watch]int
	k8s   *k8sReader
}

func (rd *reader) record(line []byte, lineNo int) error {
	var head typeOnly
	if err := json.Unmarshal(line, &head); err != nil {
		return describeJSONError(err)
	}
	t := rd.t
	switch head.Type {
	case "op":
		var r opRecord
		if err := strict(line, &r); err != nil {
			return err
		}
		op := Op{Line: lineNo, Error: r.Error}
		var err error
		if op.Client, op.Call, op.Return, err = clientTimes(r.Client, r.Call, r.Return); err != nil {
			return err
		}
		if op.Request, op.Serializable, err = fromWireRequest(r.Request, rd.v); err != nil {
			return err
		}
		switch {
		case r.Response != nil && r.Error != "":
			return errors.New(`an op has either a "response" (its outcome) or an "error" (outcome unknown), not both`)
		case r.Response != nil:
			if r.Return == nil {
				return errors.New(`an op with a "response" needs its "return" time`)
			}
			if op.Response, err = fromWireResponse(r.Response, op.Request); err != nil {
				return err
			}
		case r.Error == "":
			return errors.New(`an op needs a "response", or an "error" saying why its outcome is unknown`)
		}
		t.Ops = append(t.Ops, op)
	case "watch":
		var r watchRecord
		if err := strict(line, &r); err != nil {
			return err
		}
		w := &Watch{Line: lineNo, Stream: r.Stream}
		var err error
		if w.Client, err = need(r.Client, "client"); err != nil {
			return err
		}
		if w.ID, err = need(r.Watch, "watch"); err != nil {
			return err
		}
		if r.Stream != nil && rd.v < 2 {
			return errors.New(`a watch's "stream" is new in version 2, and the header says version 1`)
		}
		if w.Time, err = needTime(r.Time, "time"); err != nil {
			return err
		}
		if w.Request, err = fromWireWatchRequest(r.Request); err != nil {
			return err
		}
		id := [2]int{w.Client, w.ID}
		if prev, ok := rd.watches[id]; ok {
			return fmt.Errorf("watch %d of client %d was already created on line %d", w.ID, w.Client, prev.Line)
		}
		rd.watches[id] = w
		t.Watches = append(t.Watches, w)
	case "watch_response":
		var r watchResponseRecord
		if err := strict(line, &r); err != nil {
			return err
		}
		client, err := need(r.Client, "client")
		if err != nil {
			return err
		}
		id, err := need(r.Watch, "watch")
		if err != nil {
			return err
		}
		w, ok := rd.watches[[2]int{client, id}]
		if !ok {
			return fmt.Errorf("response to watch %d of client %d, which no earlier line created", id, client)
		}
		wr := WatchResponse{Line: lineNo}
		if wr.Time, err = need(r.Time, "time"); err != nil {
			return err
		}
		if wr.Time < w.Time {
			return fmt.Errorf("response at time %d precedes its watch's creation at %d (line %d)", wr.Time, w.Time, w.Line)
		}
		if n := len(w.Responses); rd.v >= 2 && n > 0 && wr.Time < w.Responses[n-1].Time {
			last := w.Responses[n-1]
			return fmt.Errorf("response at time %d precedes the watch's previous response at %d (line %d): responses are recorded in the order received", wr.Time, last.Time, last.Line)
		}
		if l, ok := rd.ended[w]; ok {
			return fmt.Errorf("response to watch %d of client %d after the error that ended it (line %d)", id, client, l)
		}
		if err := fromWireWatchResp(r.Response, rd.v, &wr); err != nil {
			return err
		}
		if wr.Error != "" {
			if rd.ended == nil {
				rd.ended = map[*Watch]int{}
			}
			rd.ended[w] = lineNo
		}
		w.Responses = append(w.Responses, wr)
	case "progress_request":
		if rd.v < 2 {
			return errors.New(`the record type "progress_request" is new in version 2, and the header says version 1`)
		}
		var r progressRequestRecord
		if err := strict(line, &r); err != nil {
			return err
		}
		p := ProgressRequest{Line: lineNo}
		var err error
		if p.Client, err = need(r.Client, "client"); err != nil {
			return err
		}
		if p.Stream, err = need(r.Stream, "stream"); err != nil {
			return err
		}
		if p.Time, err = needTime(r.Time, "time"); err != nil {
			return err
		}
		t.ProgressRequests = append(t.ProgressRequests, p)
	case "annotation":
		var r annotationRecord
		if err := strict(line, &r); err != nil {
			return err
		}
		a := Annotation{Line: lineNo, Tag: r.Tag, Text: r.Text}
		var err error
		if a.Time, err = needTime(r.Time, "time"); err != nil {
			return err
		}
		a.End = a.Time
		if r.End != nil {
			if *r.End < a.Time {
				return fmt.Errorf("\"end\" (%d) is before \"time\" (%d)", *r.End, a.Time)
			}
			a.End = *r.End
		}
		if a.Tag == "" {
			return errors.New(`an annotation needs a "tag"`)
		}
		t.Annotations = append(t.Annotations, a)
	case "lease":
		return rd.leaseRecord(line, lineNo)
	case "k8s_list", "k8s_watch", "k8s_watch_event", "k8s_watch_end", "informer", "informer_cache":
		return rd.k8sRecord(head.Type, line, lineNo)
	case "":
		return errors.New(`record without a "type" (op, lease, watch, watch_response, progress_request, annotation, or a Kubernetes record)`)
	default:
		return fmt.Errorf("unknown record type %q (op, lease, watch, watch_response, progress_request, annotation, k8s_list, k8s_watch, k8s_watch_event, k8s_watch_end, informer or informer_cache)", head.Type)
	}
	return nil
}
