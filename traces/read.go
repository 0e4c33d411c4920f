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
)

// MaxLine bounds the length of one line of a trace (64 MiB): a longer line is
// reported as malformed rather than read into memory.
const MaxLine = 64 << 20

// ReadFile reads the trace at path; see [Read]. A path ending in ".gz" is
// decompressed.
func ReadFile(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: not gzip data: %v", path, err)
		}
		defer zr.Close()
		r = zr
	}
	return Read(r, path)
}

// Read reads a whole trace from r. name is used in messages and as the
// trace's Name. A malformed trace fails with an error "name:line: what is
// wrong"; Read never panics on malformed input.
//
// Beyond the JSON shapes, Read checks what a checker relies on: the header
// comes first and names this format and version; every operation sets
// exactly one kind of request and its response answers that kind; times are
// not negative and a return is not before its call; a watch's (client,
// watch) pair is unique and each watch response follows its watch.
func Read(r io.Reader, name string) (*Trace, error) {
	t := &Trace{Name: name}
	br := bufio.NewReader(r)
	watches := map[[2]int]*Watch{}
	for lineNo := 1; ; lineNo++ {
		line, err := readLine(br)
		if err == io.EOF {
			if lineNo == 1 {
				return nil, fmt.Errorf("%s:1: empty trace: the first line must be the header", name)
			}
			return t, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, lineNo, err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			if lineNo == 1 {
				return nil, fmt.Errorf("%s:1: the first line must be the header, not a blank line", name)
			}
			continue
		}
		if lineNo == 1 {
			if err := readHeader(line, &t.Header); err != nil {
				return nil, fmt.Errorf("%s:1: %v", name, err)
			}
			continue
		}
		if err := readRecord(t, watches, line, lineNo); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, lineNo, err)
		}
	}
}

func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if err != nil {
			if err == io.EOF && len(line) > 0 {
				return line, nil
			}
			return nil, err
		}
		line = append(line, chunk...)
		if len(line) > MaxLine {
			return nil, fmt.Errorf("line longer than %d bytes", MaxLine)
		}
		if !isPrefix {
			return line, nil
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
	if probe.Version != Version {
		return fmt.Errorf("trace format version %d is not supported (this watchspec reads version %d)", probe.Version, Version)
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
	return nil
}

func need[T any](p *T, field string) (T, error) {
	if p == nil {
		var zero T
		return zero, fmt.Errorf("missing %q", field)
	}
	return *p, nil
}

func nonNegative(v int64, field string) error {
	if v < 0 {
		return fmt.Errorf("%q is negative (%d): times are nanoseconds since the start", field, v)
	}
	return nil
}

func readRecord(t *Trace, watches map[[2]int]*Watch, line []byte, lineNo int) error {
	var head typeOnly
	if err := json.Unmarshal(line, &head); err != nil {
		return describeJSONError(err)
	}
	switch head.Type {
	case "op":
		var r opRecord
		if err := strict(line, &r); err != nil {
			return err
		}
		op := Op{Line: lineNo, Error: r.Error}
		var err error
		if op.Client, err = need(r.Client, "client"); err != nil {
			return err
		}
		if op.Call, err = need(r.Call, "call"); err != nil {
			return err
		}
		if err := nonNegative(op.Call, "call"); err != nil {
			return err
		}
		if r.Return != nil {
			op.Return = *r.Return
			if op.Return < op.Call {
				return fmt.Errorf("\"return\" (%d) is before \"call\" (%d)", op.Return, op.Call)
			}
		}
		if op.Request, err = fromWireRequest(r.Request); err != nil {
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
		w := &Watch{Line: lineNo}
		var err error
		if w.Client, err = need(r.Client, "client"); err != nil {
			return err
		}
		if w.ID, err = need(r.Watch, "watch"); err != nil {
			return err
		}
		if w.Time, err = need(r.Time, "time"); err != nil {
			return err
		}
		if err := nonNegative(w.Time, "time"); err != nil {
			return err
		}
		if w.Request, err = fromWireWatchRequest(r.Request); err != nil {
			return err
		}
		id := [2]int{w.Client, w.ID}
		if prev, ok := watches[id]; ok {
			return fmt.Errorf("watch %d of client %d was already created on line %d", w.ID, w.Client, prev.Line)
		}
		watches[id] = w
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
		w, ok := watches[[2]int{client, id}]
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
		if wr.Response, err = fromWireWatchResp(r.Response); err != nil {
			return err
		}
		w.Responses = append(w.Responses, wr)
	case "annotation":
		var r annotationRecord
		if err := strict(line, &r); err != nil {
			return err
		}
		a := Annotation{Line: lineNo, Tag: r.Tag, Text: r.Text}
		var err error
		if a.Time, err = need(r.Time, "time"); err != nil {
			return err
		}
		if err := nonNegative(a.Time, "time"); err != nil {
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
	case "k8s_list", "k8s_watch", "k8s_watch_event", "k8s_watch_end", "informer", "informer_cache":
		return readK8sRecord(t, head.Type, line)
	case "":
		return errors.New(`record without a "type" (op, watch, watch_response, annotation, or a Kubernetes record)`)
	default:
		return fmt.Errorf("unknown record type %q (op, watch, watch_response, annotation, k8s_list, k8s_watch, k8s_watch_event, k8s_watch_end, informer or informer_cache)", head.Type)
	}
	return nil
}
