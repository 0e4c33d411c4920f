package traces

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
)

// Bytes is a byte string in JSON: a string when valid UTF-8, else
// {"base64": "..."}.
type Bytes string

func (b Bytes) MarshalJSON() ([]byte, error) {
	if utf8.ValidString(string(b)) {
		return json.Marshal(string(b))
	}
	return json.Marshal(struct {
		Base64 string `json:"base64"`
	}{base64.StdEncoding.EncodeToString([]byte(b))})
}

func (b *Bytes) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		// encoding/json turns a lone surrogate escape into U+FFFD, so two
		// different strings would read as the same bytes. (Raw invalid
		// UTF-8 never gets here: Read rejects the whole line first.)
		if esc := loneSurrogate(data); esc != "" {
			return fmt.Errorf(`a byte string holds %s, half of a UTF-16 surrogate pair, which stands for no bytes: write bytes that are not UTF-8 as {"base64": "..."}`, esc)
		}
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*b = Bytes(s)
		return nil
	}
	var o struct {
		Base64 *string `json:"base64"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil || o.Base64 == nil {
		return errors.New(`a byte string must be a JSON string or {"base64": "..."}`)
	}
	raw, err := base64.StdEncoding.DecodeString(*o.Base64)
	if err != nil {
		return fmt.Errorf("bad base64 in byte string: %v", err)
	}
	*b = Bytes(raw)
	return nil
}

// loneSurrogate returns the first \uXXXX escape of the JSON string token s
// that is half of a UTF-16 surrogate pair without its other half, or "".
func loneSurrogate(s []byte) string {
	hex4 := func(i int) (uint64, bool) {
		if i+6 > len(s) || s[i] != '\\' || s[i+1] != 'u' {
			return 0, false
		}
		r, err := strconv.ParseUint(string(s[i+2:i+6]), 16, 16)
		return r, err == nil
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		if !ok {
			i++ // an escaped character; a bad \u escape is the decoder's to report
			continue
		}
		switch {
		case 0xD800 <= r && r < 0xDC00:
			if lo, ok := hex4(i + 6); ok && 0xDC00 <= lo && lo < 0xE000 {
				i += 11
				continue
			}
			return string(s[i : i+6])
		case 0xDC00 <= r && r < 0xE000:
			return string(s[i : i+6])
		}
		i += 5
	}
	return ""
}

// The JSON shapes of the records. Each line of a trace is one record, told
// apart by "type".
type (
	// typeOnly reads a record's type before the record itself.
	typeOnly struct {
		Type string `json:"type"`
	}
	opRecord struct {
		Type     string        `json:"type"`
		Client   *int          `json:"client"`
		Call     *int64        `json:"call"`
		Return   *int64        `json:"return,omitempty"`
		Request  *wireRequest  `json:"request"`
		Response *wireResponse `json:"response,omitempty"`
		Error    string        `json:"error,omitempty"`
	}
	watchRecord struct {
		Type    string            `json:"type"`
		Client  *int              `json:"client"`
		Watch   *int              `json:"watch"`
		Stream  *int              `json:"stream,omitempty"` // version 2
		Time    *int64            `json:"time"`
		Request *wireWatchRequest `json:"request"`
	}
	progressRequestRecord struct { // version 2
		Type   string `json:"type"`
		Client *int   `json:"client"`
		Stream *int   `json:"stream"`
		Time   *int64 `json:"time"`
	}
	watchResponseRecord struct {
		Type     string         `json:"type"`
		Client   *int           `json:"client"`
		Watch    *int           `json:"watch"`
		Time     *int64         `json:"time"`
		Response *wireWatchResp `json:"response"`
	}
	annotationRecord struct {
		Type string `json:"type"`
		Time *int64 `json:"time"`
		End  *int64 `json:"end,omitempty"`
		Tag  string `json:"tag"`
		Text string `json:"text,omitempty"`
	}

	wireKV struct {
		Key            Bytes `json:"key"`
		Value          Bytes `json:"value,omitempty"`
		CreateRevision int64 `json:"create_revision,omitempty"`
		ModRevision    int64 `json:"mod_revision"`
		Version        int64 `json:"version,omitempty"`
		Lease          int64 `json:"lease,omitempty"` // version 2, leases
	}

	wireRange struct {
		Key       Bytes `json:"key"`
		RangeEnd  Bytes `json:"range_end,omitempty"`
		Revision  int64 `json:"revision,omitempty"`
		Limit     int64 `json:"limit,omitempty"`
		CountOnly bool  `json:"count_only,omitempty"`
		KeysOnly  bool  `json:"keys_only,omitempty"`
	}
	// wireRangeRequest is a range that is the whole request of an op (not
	// one of a txn): it may be serializable.
	wireRangeRequest struct {
		wireRange
		Serializable *bool `json:"serializable,omitempty"` // version 2
	}
	wirePut struct {
		Key    Bytes `json:"key"`
		Value  Bytes `json:"value"`
		PrevKV bool  `json:"prev_kv,omitempty"`
		Lease  int64 `json:"lease,omitempty"` // version 2, leases
	}
	wireDelete struct {
		Key      Bytes `json:"key"`
		RangeEnd Bytes `json:"range_end,omitempty"`
		PrevKV   bool  `json:"prev_kv,omitempty"`
	}
	wireCompare struct {
		Key    Bytes  `json:"key"`
		Target string `json:"target"`
		Result string `json:"result"`
		Value  *Bytes `json:"value,omitempty"`
		Number *int64 `json:"number,omitempty"`
	}
	wireOp struct {
		Range  *wireRange  `json:"range,omitempty"`
		Put    *wirePut    `json:"put,omitempty"`
		Delete *wireDelete `json:"delete,omitempty"`
	}
	wireTxn struct {
		Compare []wireCompare `json:"compare,omitempty"`
		Success []wireOp      `json:"success,omitempty"`
		Failure []wireOp      `json:"failure,omitempty"`
	}
	wireCompact struct {
		Revision int64 `json:"revision"`
	}
	wireRequest struct {
		Range   *wireRangeRequest `json:"range,omitempty"`
		Put     *wirePut          `json:"put,omitempty"`
		Delete  *wireDelete       `json:"delete,omitempty"`
		Txn     *wireTxn          `json:"txn,omitempty"`
		Compact *wireCompact      `json:"compact,omitempty"`
	}

	wireRangeResp struct {
		KVs   []wireKV `json:"kvs,omitempty"`
		More  bool     `json:"more,omitempty"`
		Count int64    `json:"count"`
	}
	wirePutResp struct {
		PrevKV *wireKV `json:"prev_kv,omitempty"`
	}
	wireDeleteResp struct {
		Deleted int64    `json:"deleted"`
		PrevKVs []wireKV `json:"prev_kvs,omitempty"`
	}
	wireOpResp struct {
		Range  *wireRangeResp  `json:"range,omitempty"`
		Put    *wirePutResp    `json:"put,omitempty"`
		Delete *wireDeleteResp `json:"delete,omitempty"`
	}
	wireTxnResp struct {
		Succeeded bool         `json:"succeeded"`
		Responses []wireOpResp `json:"responses,omitempty"`
	}
	wireResponse struct {
		Revision int64           `json:"revision,omitempty"`
		Error    string          `json:"error,omitempty"`
		Range    *wireRangeResp  `json:"range,omitempty"`
		Put      *wirePutResp    `json:"put,omitempty"`
		Delete   *wireDeleteResp `json:"delete,omitempty"`
		Txn      *wireTxnResp    `json:"txn,omitempty"`
		Compact  *struct{}       `json:"compact,omitempty"`
	}

	wireWatchRequest struct {
		Key            Bytes    `json:"key"`
		RangeEnd       Bytes    `json:"range_end,omitempty"`
		StartRevision  int64    `json:"start_revision,omitempty"`
		Filters        []string `json:"filters,omitempty"`
		PrevKV         bool     `json:"prev_kv,omitempty"`
		ProgressNotify bool     `json:"progress_notify,omitempty"`
		Fragment       bool     `json:"fragment,omitempty"`
	}
	wireEvent struct {
		Type   string  `json:"type"`
		KV     *wireKV `json:"kv"`
		PrevKV *wireKV `json:"prev_kv,omitempty"`
	}
	wireWatchResp struct {
		// Revision is required in version 1 (where 0 also meant "not
		// recorded"); in version 2 absent means not recorded.
		Revision        *int64      `json:"revision,omitempty"`
		Events          []wireEvent `json:"events,omitempty"`
		Created         bool        `json:"created,omitempty"`
		Canceled        bool        `json:"canceled,omitempty"`
		CompactRevision int64       `json:"compact_revision,omitempty"`
		CancelReason    string      `json:"cancel_reason,omitempty"`
		Progress        bool        `json:"progress,omitempty"`
		Error           string      `json:"error,omitempty"` // version 2
	}
)

// Encoding: model → wire.

func toWireKV(k kv.KeyValue) wireKV {
	return wireKV{Key: Bytes(k.Key), Value: Bytes(k.Value), CreateRevision: k.CreateRevision, ModRevision: k.ModRevision, Version: k.Version, Lease: k.Lease}
}

func toWireKVs(ks []kv.KeyValue) []wireKV {
	var out []wireKV
	for _, k := range ks {
		out = append(out, toWireKV(k))
	}
	return out
}

func toWireKVPtr(k *kv.KeyValue) *wireKV {
	if k == nil {
		return nil
	}
	w := toWireKV(*k)
	return &w
}

var targetNames = map[kv.CompareTarget]string{kv.TargetValue: "value", kv.TargetVersion: "version",
	kv.TargetCreateRevision: "create_revision", kv.TargetModRevision: "mod_revision"}
var resultNames = map[kv.CompareResult]string{kv.CompareEqual: "=", kv.CompareNotEqual: "!=",
	kv.CompareLess: "<", kv.CompareGreater: ">"}

func toWireRange(r *kv.RangeRequest) *wireRange {
	if r == nil {
		return nil
	}
	return &wireRange{Key: Bytes(r.Key), RangeEnd: Bytes(r.RangeEnd), Revision: r.Revision, Limit: r.Limit, CountOnly: r.CountOnly, KeysOnly: r.KeysOnly}
}

func toWirePut(p *kv.PutRequest) *wirePut {
	if p == nil {
		return nil
	}
	return &wirePut{Key: Bytes(p.Key), Value: Bytes(p.Value), PrevKV: p.PrevKV, Lease: p.Lease}
}

func toWireDelete(d *kv.DeleteRequest) *wireDelete {
	if d == nil {
		return nil
	}
	return &wireDelete{Key: Bytes(d.Key), RangeEnd: Bytes(d.RangeEnd), PrevKV: d.PrevKV}
}

func toWireOps(ops []kv.Op) []wireOp {
	var out []wireOp
	for _, o := range ops {
		out = append(out, wireOp{Range: toWireRange(o.Range), Put: toWirePut(o.Put), Delete: toWireDelete(o.Delete)})
	}
	return out
}

// toWireRequest encodes an op's request; serializable applies to a range.
func toWireRequest(r kv.Request, serializable bool) *wireRequest {
	w := &wireRequest{Put: toWirePut(r.Put), Delete: toWireDelete(r.Delete)}
	if r.Range != nil {
		w.Range = &wireRangeRequest{wireRange: *toWireRange(r.Range)}
		if serializable {
			w.Range.Serializable = &serializable
		}
	}
	if r.Txn != nil {
		t := &wireTxn{Success: toWireOps(r.Txn.Success), Failure: toWireOps(r.Txn.Failure)}
		for _, c := range r.Txn.Compare {
			wc := wireCompare{Key: Bytes(c.Key), Target: targetNames[c.Target], Result: resultNames[c.Result]}
			if c.Target == kv.TargetValue {
				v := Bytes(c.Value)
				wc.Value = &v
			} else {
				n := c.Number
				wc.Number = &n
			}
			t.Compare = append(t.Compare, wc)
		}
		w.Txn = t
	}
	if r.Compact != nil {
		w.Compact = &wireCompact{Revision: r.Compact.Revision}
	}
	return w
}

func toWireRangeResp(r *kv.RangeResponse) *wireRangeResp {
	if r == nil {
		return nil
	}
	return &wireRangeResp{KVs: toWireKVs(r.KVs), More: r.More, Count: r.Count}
}

func toWirePutResp(p *kv.PutResponse) *wirePutResp {
	if p == nil {
		return nil
	}
	return &wirePutResp{PrevKV: toWireKVPtr(p.PrevKV)}
}

func toWireDeleteResp(d *kv.DeleteResponse) *wireDeleteResp {
	if d == nil {
		return nil
	}
	return &wireDeleteResp{Deleted: d.Deleted, PrevKVs: toWireKVs(d.PrevKVs)}
}

func toWireResponse(r kv.Response) *wireResponse {
	w := &wireResponse{Revision: r.Revision, Range: toWireRangeResp(r.Range), Put: toWirePutResp(r.Put), Delete: toWireDeleteResp(r.Delete)}
	if r.Err != nil {
		w.Error = r.Err.Error()
	}
	if r.Txn != nil {
		t := &wireTxnResp{Succeeded: r.Txn.Succeeded}
		for _, o := range r.Txn.Responses {
			t.Responses = append(t.Responses, wireOpResp{Range: toWireRangeResp(o.Range), Put: toWirePutResp(o.Put), Delete: toWireDeleteResp(o.Delete)})
		}
		w.Txn = t
	}
	if r.Compact != nil {
		w.Compact = &struct{}{}
	}
	return w
}

func toWireWatchRequest(r watch.Request) *wireWatchRequest {
	w := &wireWatchRequest{Key: Bytes(r.Key), RangeEnd: Bytes(r.RangeEnd), StartRevision: r.StartRevision, PrevKV: r.PrevKV, ProgressNotify: r.ProgressNotify, Fragment: r.Fragment}
	if r.NoPut {
		w.Filters = append(w.Filters, "NOPUT")
	}
	if r.NoDelete {
		w.Filters = append(w.Filters, "NODELETE")
	}
	return w
}

// toWireWatchResp encodes a watch response in version v: version 1 always
// writes the revision (0 when unknown), version 2 only when recorded.
func toWireWatchResp(wr WatchResponse, v int) *wireWatchResp {
	r := wr.Response
	w := &wireWatchResp{Created: r.Created, Canceled: r.Canceled, CompactRevision: r.CompactRevision,
		CancelReason: r.CancelReason, Progress: r.IsProgressNotify(), Error: wr.Error}
	if v == 1 || !wr.RevisionUnknown {
		rev := r.Revision
		w.Revision = &rev
	}
	for _, e := range r.Events {
		kvw := toWireKV(e.KV)
		w.Events = append(w.Events, wireEvent{Type: e.Type.String(), KV: &kvw, PrevKV: toWireKVPtr(e.PrevKV)})
	}
	return w
}

// Decoding: wire → model, with validation. Errors say what is wrong; the
// reader adds file and line.

// notNegative rejects a negative revision, version or count: a server
// never reports one, so it is damaged input, not a property to check.
func notNegative(what string, fields ...any) error {
	for i := 0; i < len(fields); i += 2 {
		if v := fields[i+1].(int64); v < 0 {
			return fmt.Errorf("%s%q is negative (%d): a server never reports a negative %s", what, fields[i], v, fields[i])
		}
	}
	return nil
}

func fromWireKV(w *wireKV, what string) (kv.KeyValue, error) {
	if w == nil {
		return kv.KeyValue{}, fmt.Errorf("%s: missing", what)
	}
	if w.Key == "" {
		return kv.KeyValue{}, fmt.Errorf("%s: empty key", what)
	}
	if err := notNegative(what+": ", "create_revision", w.CreateRevision, "mod_revision", w.ModRevision, "version", w.Version); err != nil {
		return kv.KeyValue{}, err
	}
	return kv.KeyValue{Key: string(w.Key), Value: string(w.Value), CreateRevision: w.CreateRevision, ModRevision: w.ModRevision, Version: w.Version, Lease: w.Lease}, nil
}

func fromWireKVs(ws []wireKV, what string) ([]kv.KeyValue, error) {
	var out []kv.KeyValue
	for i := range ws {
		k, err := fromWireKV(&ws[i], fmt.Sprintf("%s[%d]", what, i))
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}

func fromWireKVPtr(w *wireKV, what string) (*kv.KeyValue, error) {
	if w == nil {
		return nil, nil
	}
	k, err := fromWireKV(w, what)
	return &k, err
}

func one(what string, set ...bool) error {
	n := 0
	for _, b := range set {
		if b {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("%s must set exactly one of its operations, not %d", what, n)
	}
	return nil
}

func fromWireRange(w *wireRange) *kv.RangeRequest {
	if w == nil {
		return nil
	}
	return &kv.RangeRequest{Key: string(w.Key), RangeEnd: string(w.RangeEnd), Revision: w.Revision, Limit: w.Limit, CountOnly: w.CountOnly, KeysOnly: w.KeysOnly}
}

func fromWirePut(w *wirePut) *kv.PutRequest {
	if w == nil {
		return nil
	}
	return &kv.PutRequest{Key: string(w.Key), Value: string(w.Value), PrevKV: w.PrevKV, Lease: w.Lease}
}

func fromWireDelete(w *wireDelete) *kv.DeleteRequest {
	if w == nil {
		return nil
	}
	return &kv.DeleteRequest{Key: string(w.Key), RangeEnd: string(w.RangeEnd), PrevKV: w.PrevKV}
}

func fromWireOps(ws []wireOp, what string) ([]kv.Op, error) {
	var out []kv.Op
	for i, w := range ws {
		if err := one(fmt.Sprintf("%s[%d]", what, i), w.Range != nil, w.Put != nil, w.Delete != nil); err != nil {
			return nil, err
		}
		out = append(out, kv.Op{Range: fromWireRange(w.Range), Put: fromWirePut(w.Put), Delete: fromWireDelete(w.Delete)})
	}
	return out, nil
}

func lookup[K comparable](names map[K]string, name, what string) (K, error) {
	for k, n := range names {
		if n == name {
			return k, nil
		}
	}
	var zero K
	return zero, fmt.Errorf("%s %q is not one of %v", what, name, sortedValues(names))
}

func sortedValues[K comparable](m map[K]string) []string {
	var vs []string
	for _, v := range m {
		vs = append(vs, v)
	}
	for i := range vs {
		for j := i + 1; j < len(vs); j++ {
			if vs[j] < vs[i] {
				vs[i], vs[j] = vs[j], vs[i]
			}
		}
	}
	return vs
}

// fromWireRequest decodes an op's request in version v, and whether it is
// a serializable range.
func fromWireRequest(w *wireRequest, v int) (kv.Request, bool, error) {
	r, err := fromWireRequestKinds(w)
	if err != nil || w.Range == nil || w.Range.Serializable == nil {
		return r, false, err
	}
	if v < 2 {
		return r, false, errors.New(`"serializable" is new in version 2, and the header says version 1`)
	}
	return r, *w.Range.Serializable, nil
}

func fromWireRequestKinds(w *wireRequest) (kv.Request, error) {
	if w == nil {
		return kv.Request{}, errors.New("op without a request")
	}
	if err := one("request", w.Range != nil, w.Put != nil, w.Delete != nil, w.Txn != nil, w.Compact != nil); err != nil {
		return kv.Request{}, err
	}
	r := kv.Request{Put: fromWirePut(w.Put), Delete: fromWireDelete(w.Delete)}
	if w.Range != nil {
		r.Range = fromWireRange(&w.Range.wireRange)
	}
	if w.Compact != nil {
		r.Compact = &kv.CompactRequest{Revision: w.Compact.Revision}
	}
	if w.Txn != nil {
		t := &kv.TxnRequest{}
		for i, c := range w.Txn.Compare {
			what := fmt.Sprintf("txn compare[%d]", i)
			target, err := lookup(targetNames, c.Target, what+" target")
			if err != nil {
				return kv.Request{}, err
			}
			result, err := lookup(resultNames, c.Result, what+" result")
			if err != nil {
				return kv.Request{}, err
			}
			kc := kv.Compare{Key: string(c.Key), Target: target, Result: result}
			switch {
			case target == kv.TargetValue && c.Value == nil:
				return kv.Request{}, fmt.Errorf("%s compares a value but has no \"value\"", what)
			case target == kv.TargetValue:
				kc.Value = string(*c.Value)
			case c.Number == nil:
				return kv.Request{}, fmt.Errorf("%s compares a %s but has no \"number\"", what, c.Target)
			default:
				kc.Number = *c.Number
			}
			t.Compare = append(t.Compare, kc)
		}
		var err error
		if t.Success, err = fromWireOps(w.Txn.Success, "txn success"); err != nil {
			return kv.Request{}, err
		}
		if t.Failure, err = fromWireOps(w.Txn.Failure, "txn failure"); err != nil {
			return kv.Request{}, err
		}
		r.Txn = t
	}
	return r, nil
}

func fromWireRangeResp(w *wireRangeResp, what string) (*kv.RangeResponse, error) {
	if w == nil {
		return nil, nil
	}
	if err := notNegative(what+" ", "count", w.Count); err != nil {
		return nil, err
	}
	kvs, err := fromWireKVs(w.KVs, what+" kvs")
	return &kv.RangeResponse{KVs: kvs, More: w.More, Count: w.Count}, err
}

func fromWirePutResp(w *wirePutResp, what string) (*kv.PutResponse, error) {
	if w == nil {
		return nil, nil
	}
	p, err := fromWireKVPtr(w.PrevKV, what+" prev_kv")
	return &kv.PutResponse{PrevKV: p}, err
}

func fromWireDeleteResp(w *wireDeleteResp, what string) (*kv.DeleteResponse, error) {
	if w == nil {
		return nil, nil
	}
	if err := notNegative(what+" ", "deleted", w.Deleted); err != nil {
		return nil, err
	}
	kvs, err := fromWireKVs(w.PrevKVs, what+" prev_kvs")
	return &kv.DeleteResponse{Deleted: w.Deleted, PrevKVs: kvs}, err
}

// fromWireResponse decodes the response to req and checks that its shape
// answers req.
func fromWireResponse(w *wireResponse, req kv.Request) (*kv.Response, error) {
	if err := notNegative("response ", "revision", w.Revision); err != nil {
		return nil, err
	}
	r := &kv.Response{Revision: w.Revision}
	if w.Error != "" {
		if w.Range != nil || w.Put != nil || w.Delete != nil || w.Txn != nil || w.Compact != nil {
			return nil, errors.New("a response with an error carries nothing else")
		}
		r.Err = errors.New(w.Error)
		return r, nil
	}
	var err error
	if r.Range, err = fromWireRangeResp(w.Range, "response range"); err != nil {
		return nil, err
	}
	if r.Put, err = fromWirePutResp(w.Put, "response put"); err != nil {
		return nil, err
	}
	if r.Delete, err = fromWireDeleteResp(w.Delete, "response delete"); err != nil {
		return nil, err
	}
	if w.Compact != nil {
		r.Compact = &kv.CompactResponse{}
	}
	if w.Txn != nil {
		t := &kv.TxnResponse{Succeeded: w.Txn.Succeeded}
		for i, o := range w.Txn.Responses {
			what := fmt.Sprintf("response txn responses[%d]", i)
			if err := one(what, o.Range != nil, o.Put != nil, o.Delete != nil); err != nil {
				return nil, err
			}
			var or kv.OpResponse
			if or.Range, err = fromWireRangeResp(o.Range, what); err != nil {
				return nil, err
			}
			if or.Put, err = fromWirePutResp(o.Put, what); err != nil {
				return nil, err
			}
			if or.Delete, err = fromWireDeleteResp(o.Delete, what); err != nil {
				return nil, err
			}
			t.Responses = append(t.Responses, or)
		}
		r.Txn = t
	}
	wantKind := map[bool]string{req.Range != nil: "range", req.Put != nil: "put", req.Delete != nil: "delete", req.Txn != nil: "txn", req.Compact != nil: "compact"}[true]
	gotKind := map[bool]string{r.Range != nil: "range", r.Put != nil: "put", r.Delete != nil: "delete", r.Txn != nil: "txn", r.Compact != nil: "compact"}[true]
	if err := one("response", r.Range != nil, r.Put != nil, r.Delete != nil, r.Txn != nil, r.Compact != nil); err != nil {
		return nil, fmt.Errorf("the response to a %s must carry exactly one of its results (a %q object)", wantKind, wantKind)
	}
	if gotKind != wantKind {
		return nil, fmt.Errorf("the response to a %s carries a %s result", wantKind, gotKind)
	}
	// A txn response is recorded as the server sent it, even when its
	// results do not match the branch that ran (kine answers its emulation
	// of the apiserver's compaction transaction with the header alone): the
	// checker judges that (docs/SPEC.md §2.5, §2.7).
	return r, nil
}

func fromWireWatchRequest(w *wireWatchRequest) (watch.Request, error) {
	if w == nil {
		return watch.Request{}, errors.New(`watch record without a "request"`)
	}
	r := watch.Request{Key: string(w.Key), RangeEnd: string(w.RangeEnd), StartRevision: w.StartRevision, PrevKV: w.PrevKV, ProgressNotify: w.ProgressNotify, Fragment: w.Fragment}
	for _, f := range w.Filters {
		switch f {
		case "NOPUT":
			r.NoPut = true
		case "NODELETE":
			r.NoDelete = true
		default:
			return watch.Request{}, fmt.Errorf("unknown watch filter %q (NOPUT or NODELETE)", f)
		}
	}
	return r, nil
}

// fromWireWatchResp decodes a watch response of version v into wr's
// Response, RevisionUnknown and Error.
func fromWireWatchResp(w *wireWatchResp, v int, wr *WatchResponse) error {
	if w == nil {
		return errors.New(`watch_response record without a "response"`)
	}
	r, err := fromWireWatchRespBody(w)
	if err != nil {
		return err
	}
	if err := notNegative("response ", "compact_revision", w.CompactRevision); err != nil {
		return err
	}
	if w.Revision != nil {
		if err := notNegative("response ", "revision", *w.Revision); err != nil {
			return err
		}
		r.Revision = *w.Revision
	}
	known := w.Revision != nil && (v >= 2 || r.Revision != 0)
	if v < 2 && w.Error != "" {
		return errors.New(`a watch response's "error" is new in version 2, and the header says version 1`)
	}
	switch {
	case w.Error != "" && len(r.Events) > 0:
		return errors.New(`a response with an "error" ended its watch: it carries no events`)
	case w.Error != "" && r.Created:
		return errors.New(`a response with an "error" ended its watch: it is not the created response`)
	case w.Error != "" && r.CompactRevision != 0:
		return errors.New(`a compaction cancel is recorded by "compact_revision": "error" is for other errors`)
	case !known && w.Progress:
		return errors.New(`a progress notification must record its header "revision"`)
	case !known && v >= 2 && len(r.Events) == 0 && !r.Created && !r.Canceled && r.CompactRevision == 0 && w.Error == "":
		return errors.New(`the response records nothing: no "revision", no events, not created or canceled, no "error"`)
	case w.Progress != r.IsProgressNotify():
		return fmt.Errorf("\"progress\" is %v but the response %s a progress notification (no events, not created or canceled, no compact revision, a header revision)",
			w.Progress, map[bool]string{true: "is", false: "is not"}[r.IsProgressNotify()])
	}
	wr.Response, wr.RevisionUnknown, wr.Error = r, !known, w.Error
	return nil
}

func fromWireWatchRespBody(w *wireWatchResp) (watch.Response, error) {
	r := watch.Response{Created: w.Created, Canceled: w.Canceled, CompactRevision: w.CompactRevision, CancelReason: w.CancelReason}
	for i, e := range w.Events {
		what := fmt.Sprintf("events[%d]", i)
		var ev kv.Event
		switch e.Type {
		case "PUT":
			ev.Type = kv.Put
		case "DELETE":
			ev.Type = kv.Delete
		default:
			return watch.Response{}, fmt.Errorf("%s: type %q is neither PUT nor DELETE", what, e.Type)
		}
		var err error
		if ev.KV, err = fromWireKV(e.KV, what+" kv"); err != nil {
			return watch.Response{}, err
		}
		if ev.PrevKV, err = fromWireKVPtr(e.PrevKV, what+" prev_kv"); err != nil {
			return watch.Response{}, err
		}
		r.Events = append(r.Events, ev)
	}
	return r, nil
}
