// Package linearizability checks a recorded trace (package traces) against
// the specification, docs/SPEC.md: its key-value operations for
// linearizability (§2.7) against the model's kv.Step, its serializable
// reads (§2.8), the response revisions of its writes (§2.6), every watch
// stream (§3) against the committed history the linearization found, and an
// informer run (§4, §5) when the trace records one.
//
// Start with [Check]: it decides, and returns a [Result] — data, no files.
// [Result.Visualize] draws porcupine's view of a history that is not
// linearizable, separately (porcupine's own shape: CheckOperations
// decides, Visualize draws).
//
//	trace, err := traces.ReadFile("run.ndjson.gz")
//	if err != nil { ... }
//	res, err := linearizability.Check(trace, linearizability.Options{})
//	if err != nil { ... } // the trace cannot be checked at all
//	if err := res.Err(); err != nil {
//		fmt.Println(err) // every violation, with its property and SPEC section
//	}
//
// [Result.Err] is nil when every property holds and otherwise a
// *[ViolationsError] (errors.As) with every violation; report.WriteHTML
// draws the result as a page, by its own call. To check a store or an
// informer from go test, conform/conformtest and conform/informertest do
// all of this in one call.
//
// # How a history is linearized
//
// The check has two stages. The first exploits the store's revisions, which
// make most histories "traceable": every write's response names the
// revision it created, every read names the revision it saw. It runs in
// four steps, each a function of its own: bounds (what each operation's
// outcome and real-time interval allow, including writes of unknown outcome
// that watches pinned; [prepare]), placement (the revision each operation
// belongs to; [place]), ordering (writes by revision, each followed by the
// operations that observed it, by call time, checked against real time;
// [order]) and replay (through kv.Step; [replay]). When the replay answers
// every operation as recorded, that order is a linearization, found in
// O(n log n). In a trace with leases whose deletions no watch showed
// (docs/SPEC.md §3.14), writes without a known revision — those lease
// deletions, and client writes of unknown outcome that no watch pinned —
// may have created revisions that reads saw; when the plain order fails,
// the replay fills each such gap with one of them that real time and the
// reads allow ([fillGaps]). Only when it fails does the second stage run porcupine
// (github.com/anishathalye/porcupine) on the model of [NewModel], which
// searches every order and is the judge: it either finds a linearization or
// proves there is none. A history the first stage accepts is therefore
// always linearizable; one it rejects is decided by porcupine.
//
// Both stages run twice at most. First they keep only the commits every
// watch agrees with (views.go): where the responses leave a choice, such as
// which unknown write created a revision no watch saw, the linearization
// must not contradict what a watch delivered or, between two revisions it
// delivered, did not. Only when no such linearization exists — a watch is
// wrong, or the history is not linearizable — do they run again blind to
// the watches, and the watches are judged against what that finds.
//
// # Profiles
//
// A trace is checked under a profile (docs/SPEC.md §9): none — etcd's
// guarantees —, a profile of allowances for a store that differs from etcd
// on purpose (kine), or the strict profile of expectations beyond etcd. See
// [Profile] and [Options.Profile].
package linearizability
