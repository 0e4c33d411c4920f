package linearizability

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/watchspec/watchspec/model/kv"
)

// describeOp renders an operation for messages and the visualisation:
//
//	put("a", "v1") → rev 5
//	range("a".."b" @3) → rev 7 [a=1 b=2] count=2
func describeOp(req kv.Request, out Output) string {
	s := describeRequest(req)
	switch {
	case out.Response != nil && out.AnyRevision:
		return s + " → acknowledged, at a revision not recorded"
	case out.Response != nil:
		return s + " → " + describeResponse(*out.Response)
	case out.Pinned > 0:
		return fmt.Sprintf("%s → unknown outcome, seen committed at rev %d", s, out.Pinned)
	}
	return s + " → unknown outcome"
}

func q(s string) string { return strconv.Quote(s) }

func describeRange(key, end string) string {
	switch end {
	case "":
		return q(key)
	case "\x00":
		return q(key) + "..∞"
	}
	return q(key) + ".." + q(end)
}

func describeRequest(r kv.Request) string {
	switch {
	case r.Range != nil:
		return describeRangeReq(*r.Range)
	case r.Put != nil:
		return fmt.Sprintf("put(%s, %s)", q(r.Put.Key), q(r.Put.Value))
	case r.Delete != nil:
		return fmt.Sprintf("delete(%s)", describeRange(r.Delete.Key, r.Delete.RangeEnd))
	case r.Txn != nil:
		var cmps []string
		for _, c := range r.Txn.Compare {
			target := map[kv.CompareTarget]string{kv.TargetValue: "value", kv.TargetVersion: "version",
				kv.TargetCreateRevision: "create", kv.TargetModRevision: "mod"}[c.Target]
			op := map[kv.CompareResult]string{kv.CompareEqual: "=", kv.CompareNotEqual: "!=", kv.CompareLess: "<", kv.CompareGreater: ">"}[c.Result]
			operand := strconv.FormatInt(c.Number, 10)
			if c.Target == kv.TargetValue {
				operand = q(c.Value)
			}
			cmps = append(cmps, fmt.Sprintf("%s(%s)%s%s", target, q(c.Key), op, operand))
		}
		return fmt.Sprintf("txn(if %s then %s else %s)", strings.Join(cmps, " && "), describeOps(r.Txn.Success), describeOps(r.Txn.Failure))
	case r.Compact != nil:
		return fmt.Sprintf("compact(%d)", r.Compact.Revision)
	case r.LeaseRevoke != nil:
		return fmt.Sprintf("server: delete the keys of lease %d", r.LeaseRevoke.Lease)
	}
	return "invalid request"
}

func describeRangeReq(r kv.RangeRequest) string {
	s := "range(" + describeRange(r.Key, r.RangeEnd)
	if r.Revision != 0 {
		s += fmt.Sprintf(" @%d", r.Revision)
	}
	if r.Limit > 0 {
		s += fmt.Sprintf(" limit %d", r.Limit)
	}
	return s + ")"
}

func describeOps(ops []kv.Op) string {
	var parts []string
	for _, o := range ops {
		parts = append(parts, describeRequest(kv.Request{Range: o.Range, Put: o.Put, Delete: o.Delete}))
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

func describeResponse(r kv.Response) string {
	if r.Err != nil {
		return "err: " + r.Err.Error()
	}
	s := fmt.Sprintf("rev %d", r.Revision)
	switch {
	case r.Range != nil:
		s += " " + describeRangeResp(*r.Range)
	case r.Delete != nil:
		s += fmt.Sprintf(" deleted=%d", r.Delete.Deleted)
	case r.Txn != nil:
		s += map[bool]string{true: " then", false: " else"}[r.Txn.Succeeded]
		for _, o := range r.Txn.Responses {
			if o.Range != nil {
				s += " " + describeRangeResp(*o.Range)
			}
		}
	}
	return s
}

func describeRangeResp(r kv.RangeResponse) string {
	var kvs []string
	for _, k := range r.KVs {
		kvs = append(kvs, fmt.Sprintf("%s=%s@%d", q(k.Key), q(k.Value), k.ModRevision))
	}
	s := "[" + strings.Join(kvs, " ") + "]"
	if r.Count != int64(len(r.KVs)) {
		s += fmt.Sprintf(" count=%d", r.Count)
	}
	if r.More {
		s += " more"
	}
	return s
}
