package traces

import (
	"errors"
	"fmt"

	"github.com/watchspec/watchspec/model/lease"
)

// LeaseOp is one client lease operation (a "lease" record, version 2):
// grant, revoke, keep-alive, time-to-live or leases. Response is nil when
// the outcome is unknown, and then Error says why. A keep-alive stream's
// messages are recorded one LeaseOp each: Call when the request was sent,
// Return when its answer arrived.
type LeaseOp struct {
	Line         int
	Client       int
	Call, Return int64
	Request      lease.Request
	Response     *lease.Response
	Error        string
}

type (
	leaseRecord struct {
		Type     string             `json:"type"`
		Client   *int               `json:"client"`
		Call     *int64             `json:"call"`
		Return   *int64             `json:"return,omitempty"`
		Request  *wireLeaseRequest  `json:"request"`
		Response *wireLeaseResponse `json:"response,omitempty"`
		Error    string             `json:"error,omitempty"`
	}
	wireLeaseID struct {
		ID int64 `json:"id"`
	}
	wireLeaseGrant struct {
		ID  int64 `json:"id,omitempty"`
		TTL int64 `json:"ttl"`
	}
	wireLeaseTimeToLive struct {
		ID   int64 `json:"id"`
		Keys bool  `json:"keys,omitempty"`
	}
	wireLeaseRequest struct {
		Grant      *wireLeaseGrant      `json:"grant,omitempty"`
		Revoke     *wireLeaseID         `json:"revoke,omitempty"`
		KeepAlive  *wireLeaseID         `json:"keepalive,omitempty"`
		TimeToLive *wireLeaseTimeToLive `json:"timetolive,omitempty"`
		Leases     *struct{}            `json:"leases,omitempty"`
	}
	wireLeaseResponse struct {
		Revision   int64   `json:"revision,omitempty"`
		Error      string  `json:"error,omitempty"`
		ID         int64   `json:"id,omitempty"`
		TTL        int64   `json:"ttl,omitempty"`
		GrantedTTL int64   `json:"granted_ttl,omitempty"`
		Keys       []Bytes `json:"keys,omitempty"`
		IDs        []int64 `json:"ids,omitempty"`
	}
)

// LeaseOp records a client lease operation (version 2).
func (w *Writer) LeaseOp(op LeaseOp) error {
	if err := w.need2("a lease operation"); err != nil {
		return err
	}
	req, err := toWireLeaseRequest(op.Request)
	if err != nil {
		return w.fail(err)
	}
	client, call := op.Client, op.Call
	r := leaseRecord{Type: "lease", Client: &client, Call: &call, Request: req, Error: op.Error}
	if op.Response != nil || op.Return != 0 {
		ret := op.Return
		r.Return = &ret
	}
	if p := op.Response; p != nil {
		wr := &wireLeaseResponse{Revision: p.Revision, ID: p.ID, TTL: p.TTL, GrantedTTL: p.GrantedTTL, IDs: p.IDs}
		if p.Err != nil {
			wr.Error = p.Err.Error()
		}
		for _, k := range p.Keys {
			wr.Keys = append(wr.Keys, Bytes(k))
		}
		r.Response = wr
	}
	return w.line(r)
}

func toWireLeaseRequest(r lease.Request) (*wireLeaseRequest, error) {
	w := &wireLeaseRequest{}
	n := 0
	if g := r.Grant; g != nil {
		w.Grant, n = &wireLeaseGrant{ID: g.ID, TTL: g.TTL}, n+1
	}
	if v := r.Revoke; v != nil {
		w.Revoke, n = &wireLeaseID{ID: v.ID}, n+1
	}
	if k := r.KeepAlive; k != nil {
		w.KeepAlive, n = &wireLeaseID{ID: k.ID}, n+1
	}
	if t := r.TimeToLive; t != nil {
		w.TimeToLive, n = &wireLeaseTimeToLive{ID: t.ID, Keys: t.Keys}, n+1
	}
	if r.Leases != nil {
		w.Leases, n = &struct{}{}, n+1
	}
	if n != 1 {
		return nil, fmt.Errorf("traces: a lease operation sets %d requests, not exactly one (grant, revoke, keepalive, timetolive or leases)", n)
	}
	return w, nil
}

// leaseRecord reads a "lease" record.
func (rd *reader) leaseRecord(line []byte, lineNo int) error {
	if rd.v < 2 {
		return errors.New(`the record type "lease" is new in version 2, and the header says version 1`)
	}
	var r leaseRecord
	if err := strict(line, &r); err != nil {
		return err
	}
	op := LeaseOp{Line: lineNo, Error: r.Error}
	var err error
	if op.Client, op.Call, op.Return, err = clientTimes(r.Client, r.Call, r.Return); err != nil {
		return err
	}
	if r.Request == nil {
		return errors.New(`a lease record needs a "request"`)
	}
	q := r.Request
	op.Request = lease.Request{}
	n := 0
	if q.Grant != nil {
		if q.Grant.ID < 0 || q.Grant.TTL < 0 {
			return fmt.Errorf("grant: id %d and ttl %d must not be negative", q.Grant.ID, q.Grant.TTL)
		}
		op.Request.Grant, n = &lease.GrantRequest{ID: q.Grant.ID, TTL: q.Grant.TTL}, n+1
	}
	if q.Revoke != nil {
		op.Request.Revoke, n = &lease.RevokeRequest{ID: q.Revoke.ID}, n+1
	}
	if q.KeepAlive != nil {
		op.Request.KeepAlive, n = &lease.KeepAliveRequest{ID: q.KeepAlive.ID}, n+1
	}
	if q.TimeToLive != nil {
		op.Request.TimeToLive, n = &lease.TimeToLiveRequest{ID: q.TimeToLive.ID, Keys: q.TimeToLive.Keys}, n+1
	}
	if q.Leases != nil {
		op.Request.Leases, n = &lease.LeasesRequest{}, n+1
	}
	if n != 1 {
		return fmt.Errorf("a lease request sets %d of grant, revoke, keepalive, timetolive and leases; it must set exactly one", n)
	}
	switch {
	case r.Response != nil && r.Error != "":
		return errors.New(`a lease record has either a "response" (its outcome) or an "error" (outcome unknown), not both`)
	case r.Response != nil:
		if r.Return == nil {
			return errors.New(`a lease record with a "response" needs its "return" time`)
		}
		p := r.Response
		if p.Revision < 0 || p.GrantedTTL < 0 {
			return fmt.Errorf("lease response: revision %d and granted_ttl %d must not be negative", p.Revision, p.GrantedTTL)
		}
		if p.TTL < -1 {
			return fmt.Errorf("lease response: ttl %d: a TTL is −1 (lease not found) or more", p.TTL)
		}
		resp := &lease.Response{Revision: p.Revision, ID: p.ID, TTL: p.TTL, GrantedTTL: p.GrantedTTL, IDs: p.IDs}
		if p.Error != "" {
			resp = &lease.Response{Err: errors.New(p.Error)}
		}
		for _, k := range p.Keys {
			resp.Keys = append(resp.Keys, string(k))
		}
		op.Response = resp
	case r.Error == "":
		return errors.New(`a lease record needs a "response", or an "error" saying why its outcome is unknown`)
	}
	rd.t.LeaseOps = append(rd.t.LeaseOps, op)
	return nil
}
