#!/usr/bin/env python3
"""Writes the hand-written lease traces of traces/corpus (docs/CORPUS.md,
SPEC §2.9-§2.11, §3.14, §3.15): one valid lease history and one variant per
server bug, seen by a watch (lease-*) and seen only by reads (lease-reads-*). Run from the repository root: python3 traces/testdata/leasegen/gen.py
"""
import json

S = 1_000_000_000


def trace(variant):
    recs = [{"format": "watchspec-trace", "version": 2, "system": "hand-written (lease " + variant + ")",
             "start": "2026-12-02T00:00:00Z", "tool": "traces/testdata/leasegen/gen.py", "unique_values": True}]
    lease = lambda c, call, ret, req, resp: {"type": "lease", "client": c, "call": call, "return": ret, "request": req, "response": resp}
    op = lambda c, call, ret, req, resp: {"type": "op", "client": c, "call": call, "return": ret, "request": req, "response": resp}
    kv = lambda k, v, rev, l=0: dict({"key": k, "value": v, "create_revision": rev, "mod_revision": rev, "version": 1}, **({"lease": l} if l else {}))
    # Lease 1 (TTL 5 s) holds a and b; c has no lease; lease 2 holds d and is revoked.
    recs.append({"type": "watch", "client": 9, "watch": 0, "stream": 0, "time": 500, "request": {"key": "a", "range_end": "e", "prev_kv": True}})
    recs.append(lease(1, 1000, 2000, {"grant": {"id": 1, "ttl": 5}}, {"revision": 1, "id": 1, "ttl": 5}))
    recs.append(op(1, 3000, 4000, {"put": {"key": "a", "value": "1", "lease": 1}}, {"revision": 2, "put": {}}))
    recs.append(op(1, 5000, 6000, {"put": {"key": "b", "value": "2", "lease": 1}}, {"revision": 3, "put": {}}))
    recs.append(op(2, 7000, 8000, {"put": {"key": "c", "value": "3"}}, {"revision": 4, "put": {}}))
    recs.append(lease(1, 1 * S, 1 * S + 1000, {"keepalive": {"id": 1}}, {"id": 1, "ttl": 5}))
    expiry_seen = 7 * S
    if variant in ("early-expiry",):
        expiry_seen = 3 * S
    if variant == "forgotten-after-restart":
        recs.append({"type": "annotation", "time": 2 * S, "end": 2 * S + 5000, "tag": "restart", "text": "the server restarts and forgets its leases"})
        expiry_seen = 2 * S + 10000
    # Expiry of lease 1 at revision 5 (a and b); variants move b or delete c.
    b_rev = 6 if variant == "split-revision" else 5
    nxt = 7 if variant == "split-revision" else 6
    recs.append({"type": "watch_response", "client": 9, "watch": 0, "time": 600, "response": {"revision": 1, "created": True}})
    recs.append({"type": "watch_response", "client": 9, "watch": 0, "time": 9000, "response": {"revision": 4, "events": [
        {"type": "PUT", "kv": kv("a", "1", 2, 1)}, {"type": "PUT", "kv": kv("b", "2", 3, 1)}, {"type": "PUT", "kv": kv("c", "3", 4)}]}})
    dels = [{"type": "DELETE", "kv": {"key": "a", "mod_revision": 5}, "prev_kv": kv("a", "1", 2, 1)}]
    bdel = {"type": "DELETE", "kv": {"key": "b", "mod_revision": b_rev}, "prev_kv": kv("b", "2", 3, 1)}
    live = ["c"]
    if variant == "unleased-delete":
        dels.append(bdel)
        dels.append({"type": "DELETE", "kv": {"key": "c", "mod_revision": 5}, "prev_kv": kv("c", "3", 4)})
        live = []
        recs.append({"type": "watch_response", "client": 9, "watch": 0, "time": expiry_seen, "response": {"revision": 5, "events": dels}})
    elif variant == "split-revision":
        recs.append({"type": "watch_response", "client": 9, "watch": 0, "time": expiry_seen, "response": {"revision": 5, "events": dels}})
        recs.append({"type": "watch_response", "client": 9, "watch": 0, "time": expiry_seen + 1000, "response": {"revision": 6, "events": [bdel]}})
    else:
        dels.append(bdel)
        recs.append({"type": "watch_response", "client": 9, "watch": 0, "time": expiry_seen, "response": {"revision": 5, "events": dels}})
    head = nxt - 1
    t = 8 * S
    recs.append(op(2, t, t + 1000, {"range": {"key": "a", "range_end": "e"}},
                   {"revision": head, "range": {"count": len(live), **({"kvs": [kv("c", "3", 4)]} if live else {})}}))
    recs.append(lease(1, 9 * S, 9 * S + 1000, {"timetolive": {"id": 1}}, {"id": 1, "ttl": -1}))
    # Lease 2: granted, d put with it, revoked: d deleted at the revoke's revision.
    recs.append(lease(1, 10 * S, 10 * S + 1000, {"grant": {"ttl": 60}}, {"revision": head, "id": 2, "ttl": 60}))
    recs.append(op(1, 10 * S + 2000, 10 * S + 3000, {"put": {"key": "d", "value": "4", "lease": 2}}, {"revision": nxt, "put": {}}))
    recs.append(lease(1, 10 * S + 4000, 10 * S + 5000, {"revoke": {"id": 2}}, {"revision": nxt + 1}))
    recs.append({"type": "watch_response", "client": 9, "watch": 0, "time": 10 * S + 6000, "response": {"revision": nxt + 1, "events": [
        {"type": "PUT", "kv": kv("d", "4", nxt, 2)}]}})
    recs.append({"type": "watch_response", "client": 9, "watch": 0, "time": 10 * S + 7000, "response": {"revision": nxt + 1, "events": [
        {"type": "DELETE", "kv": {"key": "d", "mod_revision": nxt + 1}, "prev_kv": kv("d", "4", nxt, 2)}]}})
    if variant == "unknown-lease-put":
        recs.append(op(2, 11 * S, 11 * S + 1000, {"put": {"key": "e0", "value": "5", "lease": 99}}, {"revision": nxt + 2, "put": {}}))
    return recs


def reads_trace(variant):
    """No watch: the server's deletions are seen only by reads."""
    recs = [{"format": "watchspec-trace", "version": 2, "system": "hand-written (lease, reads only, " + variant + ")",
             "start": "2026-12-02T00:00:00Z", "tool": "traces/testdata/leasegen/gen.py", "unique_values": True}]
    lease = lambda c, call, ret, req, resp: {"type": "lease", "client": c, "call": call, "return": ret, "request": req, "response": resp}
    op = lambda c, call, ret, req, resp: {"type": "op", "client": c, "call": call, "return": ret, "request": req, "response": resp}
    kv = lambda k, v, rev, l=0: dict({"key": k, "value": v, "create_revision": rev, "mod_revision": rev, "version": 1}, **({"lease": l} if l else {}))
    rng = lambda c, call, rev, kvs: op(c, call, call + 1000, {"range": {"key": "a", "range_end": "e"}},
                                      {"revision": rev, "range": dict({"count": len(kvs)}, **({"kvs": kvs} if kvs else {}))})
    # Lease 1 (TTL 5 s) holds a and b; c has no lease.
    recs.append(lease(1, 1000, 2000, {"grant": {"id": 1, "ttl": 5}}, {"revision": 1, "id": 1, "ttl": 5}))
    recs.append(op(1, 3000, 4000, {"put": {"key": "a", "value": "1", "lease": 1}}, {"revision": 2, "put": {}}))
    recs.append(op(1, 5000, 6000, {"put": {"key": "b", "value": "2", "lease": 1}}, {"revision": 3, "put": {}}))
    recs.append(op(2, 7000, 8000, {"put": {"key": "c", "value": "3"}}, {"revision": 4, "put": {}}))
    recs.append(lease(1, 1 * S, 1 * S + 1000, {"keepalive": {"id": 1}}, {"id": 1, "ttl": 5}))
    # Lease 1 expires at revision 5; a read sees it (variants: too early,
    # c deleted with it, b left behind).
    seen = 3 * S if variant == "early-expiry" else 7 * S
    live = {"unleased-delete": [], "split": [kv("b", "2", 3, 1), kv("c", "3", 4)]}.get(variant, [kv("c", "3", 4)])
    recs.append(rng(2, seen, 5, live))
    recs.append(lease(1, 9 * S, 9 * S + 1000, {"timetolive": {"id": 1}}, {"id": 1, "ttl": -1}))
    # Lease 2: granted, d put with it, revoked (acknowledged at header 7):
    # a read finds d gone.
    recs.append(lease(1, 10 * S, 10 * S + 1000, {"grant": {"ttl": 60}}, {"revision": 5, "id": 2, "ttl": 60}))
    recs.append(op(1, 10 * S + 2000, 10 * S + 3000, {"put": {"key": "d", "value": "4", "lease": 2}}, {"revision": 6, "put": {}}))
    recs.append(lease(1, 10 * S + 4000, 10 * S + 5000, {"revoke": {"id": 2}}, {"revision": 7}))
    recs.append(rng(2, 10 * S + 6000, 7, live))
    return recs


for variant, name in [("valid", "lease-valid"), ("early-expiry", "lease-early-expiry"), ("split-revision", "lease-split-revision"),
                      ("unleased-delete", "lease-unleased-delete"), ("forgotten-after-restart", "lease-forgotten-after-restart"),
                      ("unknown-lease-put", "lease-unknown-lease-put")]:
    with open("traces/corpus/" + name + ".ndjson", "w") as f:
        for r in trace(variant):
            f.write(json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n")

for variant in ["valid", "early-expiry", "unleased-delete", "split"]:
    with open("traces/corpus/lease-reads-" + variant + ".ndjson", "w") as f:
        for r in reads_trace(variant):
            f.write(json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n")
