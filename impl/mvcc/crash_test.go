package mvcc

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The crash test runs the store in a child process (this test binary, run
// again with crashChildEnv set) under concurrent writers and frequent
// multi-batch compactions, kills it with SIGKILL at a random moment, and
// checks the data it leaves against what the child acknowledged.
//
// CRASH_TRIALS sets the number of trials (default 20; `make crash` runs 200).
// Half the children checkpoint in parts of 1 KiB
// (WATCHSPEC_CRASH_CHILD_CHECKPOINT_BYTES=4096), so that kills land
// between the parts of a checkpoint.

const crashChildEnv = "WATCHSPEC_CRASH_CHILD"

// TestCrashChild is the child's workload; it does nothing in a normal run.
// Every acknowledged write is printed, after its method returned, as one
// line: "ACK put <key> <value> <rev>", "ACK del <key> <rev>", "ACK compact
// <rev>"; "ACK try <key>" announces a delete before it is sent.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("only runs as the crash test's child")
	}
	seed, _ := strconv.ParseUint(os.Getenv(crashChildEnv+"_SEED"), 10, 64)
	opts := Options{CompactionBatchLimit: 8, CompactionSleepInterval: time.Millisecond,
		CheckpointBytes: 16 << 10, CheckpointInterval: 20 * time.Millisecond}
	// A smaller checkpoint size makes most checkpoints go in several parts
	// (a quarter of it each), and the writers wait for room more often.
	if b, err := strconv.ParseInt(os.Getenv(crashChildEnv+"_CHECKPOINT_BYTES"), 10, 64); err == nil && b > 0 {
		opts.CheckpointBytes = b
	}
	// A kill point: the child kills itself the nth time it gets there.
	if point := os.Getenv(crashChildEnv + "_POINT"); point != "" {
		nth, _ := strconv.ParseInt(os.Getenv(crashChildEnv+"_POINT_N"), 10, 64)
		var hits atomic.Int64
		die := func() {
			os.Stdout.WriteString("KILLPOINT " + point + "\n")
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		if point == pointTornFrame {
			// A write of the log cut in the middle, as a crash leaves it.
			opts.FS = tornFS{cut: func(p []byte, off int64, f File) {
				if off >= segmentHeaderLen && hits.Add(1) == nth {
					f.WriteAt(p[:len(p)/2], off)
					die()
				}
			}}
		} else {
			opts.testPoint = func(p string) {
				if p == point && hits.Add(1) == nth {
					die()
				}
			}
		}
	}
	s, err := Open(dir, opts)
	if err != nil {
		fmt.Println("OPEN FAILED", err)
		os.Exit(3)
	}
	var mu sync.Mutex
	ack := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		os.Stdout.WriteString(fmt.Sprintf("ACK "+format+"\n", args...)) // one write(2) per line
	}
	var lastDel struct {
		sync.Mutex
		rev int64
	}
	gen := os.Getenv(crashChildEnv + "_GEN")
	for w := range 8 {
		go func() {
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			var mine []string
			for i := 0; ; i++ {
				key := fmt.Sprintf("g%s/w%d/%d", gen, w, i)
				switch n := r.IntN(10); {
				case n < 2 && len(mine) > 0: // delete one of mine
					j := r.IntN(len(mine))
					k := mine[j]
					mine = append(mine[:j], mine[j+1:]...)
					ack("try %s", k) // from here on the key may be gone unacknowledged
					resp, err := s.Delete(ctx, DeleteRequest{Key: k})
					if err != nil {
						return
					}
					ack("del %s %d", k, resp.Revision)
					lastDel.Lock()
					lastDel.rev = resp.Revision
					lastDel.Unlock()
				case n < 4: // two keys in one revision
					k2 := key + "b"
					resp, err := s.Txn(ctx, TxnRequest{Success: []Op{{Put: &PutRequest{Key: key, Value: "t" + key}}, {Put: &PutRequest{Key: k2, Value: "t" + k2}}}})
					if err != nil {
						return
					}
					ack("put %s %s %d", key, "t"+key, resp.Revision)
					ack("put %s %s %d", k2, "t"+k2, resp.Revision)
					mine = append(mine, key, k2)
				default:
					resp, err := s.Put(ctx, PutRequest{Key: key, Value: "v" + key})
					if err != nil {
						return
					}
					ack("put %s %s %d", key, "v"+key, resp.Revision)
					mine = append(mine, key)
				}
			}
		}()
	}
	go func() {
		// Leases (SPEC §2.9 Lease operations, §3.15 LeaseAtomic): grants, puts
		// with a lease, revokes. A revoke deletes its keys at one revision,
		// with the lease; a crash never leaves half of it.
		r := rand.New(rand.NewPCG(seed, 99))
		g, _ := strconv.ParseInt(gen, 10, 64)
		for i := int64(1); ; i++ {
			id := g<<20 | i
			if _, err := s.LeaseGrant(ctx, Lease{ID: id, TTL: 60}); err != nil {
				return
			}
			ack("grant %d", id)
			for j := range 1 + r.IntN(3) {
				key := fmt.Sprintf("g%s/l/%d/%d", gen, i, j)
				resp, err := s.Put(ctx, PutRequest{Key: key, Value: "l" + key, Lease: id})
				if err != nil {
					return
				}
				ack("lput %s %s %d %d", key, "l"+key, resp.Revision, id)
			}
			if r.IntN(2) == 0 {
				ack("tryrevoke %d", id)
				rev, err := s.LeaseRevoke(ctx, id)
				if err != nil {
					return
				}
				ack("revoke %d %d", id, rev)
			}
		}
	}()
	go func() {
		// Compact often, and preferably at the revision of a delete: after a
		// crash, a watch from the compact revision must still see it
		// (etcd#18089, etcd#19179), and the revision must not go back if that
		// delete was the last write (etcd#17780).
		for {
			time.Sleep(5 * time.Millisecond)
			lastDel.Lock()
			c := lastDel.rev
			lastDel.Unlock()
			if c <= s.CompactRevision() {
				c = s.Revision() - 5
			}
			if c > s.CompactRevision() {
				if _, err := s.Compact(ctx, c); err == nil {
					ack("compact %d", c)
				}
			}
		}
	}()
	ack("start")
	time.Sleep(30 * time.Second) // the parent kills us long before
	os.Exit(4)
}

// The kill points of the crash test: every step of a checkpoint (a part
// committed that is not the last of its checkpoint; any part committed), a
// compaction batch, a write of the log cut in the middle, a grant written
// but not answered, and a revoke between the lease table and the log (Open
// must finish it).
const pointTornFrame = "log: half a frame written"

var killPoints = []string{"checkpoint: segment created", "checkpoint: rotated", "checkpoint: part committed", "checkpoint: committed",
	"checkpoint: removed a segment", "compaction: batch committed", pointTornFrame,
	"lease: grant's table written", "lease: revoke's table written"} // an odd number, so that every point meets checkpoints in parts

// tornFS is the operating system's file system, with a hook on every write
// of a segment.
type tornFS struct {
	OSFS
	cut func(p []byte, off int64, f File)
}

func (t tornFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := t.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return tornFile{File: f, cut: t.cut}, nil
}

type tornFile struct {
	File
	cut func(p []byte, off int64, f File)
}

func (t tornFile) WriteAt(p []byte, off int64) (int, error) {
	t.cut(p, off, t.File)
	return t.File.WriteAt(p, off)
}

// Allocate reserves as the operating system's file does, so that the
// write cut in the middle lands in a segment reserved ahead (zeros after
// it), as in a real crash.
func (t tornFile) Allocate(off, size int64) error { return t.File.(allocator).Allocate(off, size) }

// ledger is what the children acknowledged, over every trial on one directory.
type ledger struct {
	puts    map[string]ackedPut
	dels    map[string]int64
	tries   map[string]bool // deletes announced, maybe applied
	maxRev  int64
	compact int64 // the highest acknowledged compaction, -1 if none
	acks    int

	grants   map[int64]bool      // leases granted
	revokes  map[int64]int64     // leases revoked, at a revision
	ltries   map[int64]bool      // revokes announced, maybe applied
	leasePut map[string]ackedPut // keys put with a lease (in lease)
	leaseOps int                 // acknowledged grants, puts with a lease, revokes
}

type ackedPut struct {
	value string
	rev   int64
	lease int64
}

func (l *ledger) parse(line string) error {
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "ACK" {
		return nil // test framework output
	}
	num := func(s string) int64 {
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	switch {
	case f[1] == "start":
		return nil
	case f[1] == "try" && len(f) == 3:
		l.tries[f[2]] = true
		return nil
	case f[1] == "put" && len(f) == 5:
		l.puts[f[2]] = ackedPut{value: f[3], rev: num(f[4])}
		l.maxRev = max(l.maxRev, num(f[4]))
	case f[1] == "del" && len(f) == 4:
		l.dels[f[2]] = num(f[3])
		l.maxRev = max(l.maxRev, num(f[3]))
	case f[1] == "compact" && len(f) == 3:
		l.compact = max(l.compact, num(f[2]))
	case f[1] == "grant" && len(f) == 3:
		l.grants[num(f[2])] = true
		l.leaseOps++
	case f[1] == "tryrevoke" && len(f) == 3:
		l.ltries[num(f[2])] = true
		return nil
	case f[1] == "revoke" && len(f) == 4:
		l.revokes[num(f[2])] = num(f[3])
		l.leaseOps++
		l.maxRev = max(l.maxRev, num(f[3]))
	case f[1] == "lput" && len(f) == 6:
		l.leasePut[f[2]] = ackedPut{value: f[3], rev: num(f[4]), lease: num(f[5])}
		l.leaseOps++
		l.maxRev = max(l.maxRev, num(f[4]))
	default:
		return fmt.Errorf("bad line %q", line)
	}
	l.acks++
	return nil
}

func crashTrials(t *testing.T) int {
	if s := os.Getenv("CRASH_TRIALS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("CRASH_TRIALS=%q", s)
		}
		return n
	}
	return 20
}

// SPEC §2.1 (the revision never decreases, etcd#17780), §2.4 and §3.5
// (etcd#18089, etcd#19179): no acknowledged write is lost to a SIGKILL at any
// moment — including during a multi-batch compaction — and the data left is
// consistent: every revision from the compact revision on holds its events,
// the index agrees with the records, and the revision and compact revision
// are at least what was acknowledged.
func TestCrash(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("in the child")
	}
	trials := crashTrials(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d trials (CRASH_TRIALS)", seed, trials)
	r := rand.New(rand.NewPCG(seed, 0))
	var dir string
	var l *ledger
	var lastRev, lastCompact int64
	var duringCompaction, duringCheckpoint, acks, leaseAcks, lost int
	atPoint := map[string]int{}
	for trial := range trials {
		if trial%10 == 0 { // a fresh directory every ten trials; otherwise the store ages across crashes
			dir = filepath.Join(t.TempDir(), "data")
			l = &ledger{puts: map[string]ackedPut{}, dels: map[string]int64{}, tries: map[string]bool{}, compact: -1,
				grants: map[int64]bool{}, revokes: map[int64]int64{}, ltries: map[int64]bool{}, leasePut: map[string]ackedPut{}}
			lastRev, lastCompact = 1, -1
		}
		before, beforeLease := l.acks, l.leaseOps
		var env []string
		d := time.Duration(20+r.IntN(150)) * time.Millisecond
		if trial%2 == 1 { // every other trial dies at a kill point (or, if it never gets there, at the timer)
			p := killPoints[(trial/2)%len(killPoints)]
			env = []string{crashChildEnv + "_POINT=" + p, fmt.Sprintf("%s_POINT_N=%d", crashChildEnv, 1+r.IntN(6))}
			d = 5 * time.Second
		}
		if trial%4 >= 2 { // half the trials checkpoint in parts of 1 KiB
			env = append(env, crashChildEnv+"_CHECKPOINT_BYTES=4096")
		}
		hit, err := runChild(dir, r.Uint64(), trial, d, l, env...)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		if hit != "" {
			atPoint[hit]++
		}
		acks += l.acks - before
		leaseAcks += l.leaseOps - beforeLease
		comp, ckpt := interrupted(t, dir)
		if comp {
			duringCompaction++
		}
		if ckpt {
			duringCheckpoint++
		}
		n, err := verify(dir, l, lastRev, lastCompact)
		lost += n
		if err != nil {
			t.Fatalf("trial %d (seed %d): %v", trial, seed, err)
		}
		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		lastRev, lastCompact = s.Revision(), s.CompactRevision()
		s.Close()
	}
	t.Logf("%d trials, %d acknowledged writes and compactions (%d of them lease grants, puts with a lease and revokes), %d lost; %d kills interrupted a compaction, %d a checkpoint; kills at kill points: %v",
		trials, acks, leaseAcks, lost, duringCompaction, duringCheckpoint, atPoint)
	if duringCompaction == 0 && trials >= 20 {
		t.Errorf("no kill hit a compaction in %d trials: the test does not exercise crash-safe compaction", trials)
	}
	if duringCheckpoint == 0 && trials >= 20 {
		t.Errorf("no kill hit a checkpoint in %d trials: the test does not exercise crash-safe checkpoints", trials)
	}
	if trials >= 2*2*len(killPoints) {
		for _, p := range killPoints {
			if atPoint[p] == 0 {
				t.Errorf("no child died at kill point %q in %d trials", p, trials)
			}
		}
	}
}

// runChild runs one child on dir, kills it after d (unless it dies at a
// kill point first: then it returns the point), and records its acks.
func runChild(dir string, seed uint64, trial int, d time.Duration, l *ledger, env ...string) (point string, _ error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir,
		fmt.Sprintf("%s_SEED=%d", crashChildEnv, seed), fmt.Sprintf("%s_GEN=%d", crashChildEnv, trial))
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", err
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		rd := bufio.NewReader(out)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return // a line cut by the kill was never acknowledged
			}
			lines <- line
		}
	}()
	var perr error
	started := false
	for line := range lines { // until the pipe closes: the child is dead
		if strings.HasPrefix(line, "OPEN FAILED") {
			perr = fmt.Errorf("child: %s", line)
		}
		if p, ok := strings.CutPrefix(line, "KILLPOINT "); ok {
			point = strings.TrimSpace(p)
		}
		if !started && strings.HasPrefix(line, "ACK start") {
			started = true
			kill := time.AfterFunc(d, func() { cmd.Process.Signal(syscall.SIGKILL) })
			defer kill.Stop()
		}
		if err := l.parse(line); err != nil && perr == nil {
			perr = err
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if !started && point == "" && perr == nil {
		perr = fmt.Errorf("the child never started")
	}
	return point, perr
}

// interrupted reports whether the kill came in the middle of a compaction
// (one acknowledged but not finished) and of a checkpoint (more than one log
// segment, or a segment beyond the data file).
func interrupted(t *testing.T, dir string) (compaction, checkpoint bool) {
	r, err := Check(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		t.Fatalf("the data directory after the kill does not check:\n%s", r)
	}
	return r.CompactRevision > r.FinishedCompaction, r.LogSegments > 1
}

// verify reopens dir and checks it against the ledger. It returns the number
// of acknowledged writes it found missing.
func verify(dir string, l *ledger, lastRev, lastCompact int64) (lost int, err error) {
	s, err := Open(dir, Options{UnsafeNoFsync: true})
	if err != nil {
		return 0, fmt.Errorf("reopen: %w", err)
	}
	defer s.Close()
	rev, c := s.Revision(), s.CompactRevision()
	if rev < l.maxRev || rev < lastRev {
		return 1, fmt.Errorf("revision %d after the crash; acknowledged up to %d, %d before the trial (etcd#17780)", rev, l.maxRev, lastRev)
	}
	if c < l.compact || c < lastCompact {
		return 1, fmt.Errorf("compact revision %d after the crash; acknowledged %d, %d before the trial", c, l.compact, lastCompact)
	}
	// Every revision from the compact revision on holds its events.
	from := max(c, 2)
	evs, last, err := s.Events(from, rev, 0, true)
	if err != nil || last != rev {
		return 0, fmt.Errorf("Events(%d, %d) = %d events up to %d, %v", from, rev, len(evs), last, err)
	}
	byRev := map[int64][]Event{}
	for _, e := range evs {
		byRev[e.KV.ModRevision] = append(byRev[e.KV.ModRevision], e)
	}
	for r := from; r <= rev; r++ {
		if len(byRev[r]) == 0 {
			return 0, fmt.Errorf("revision %d (compact %d, current %d) holds no event", r, c, rev)
		}
	}
	var errs []string
	miss := func(format string, args ...any) {
		lost++
		if len(errs) < 5 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	has := func(r int64, typ EventType, key string) bool {
		for _, e := range byRev[r] {
			if e.Type == typ && e.KV.Key == key {
				return true
			}
		}
		return false
	}
	now, err := s.Range(ctx, RangeRequest{Key: "\x00", RangeEnd: "\x00"})
	if err != nil {
		return 0, err
	}
	live := map[string]KeyValue{}
	for _, kv := range now.KVs {
		live[kv.Key] = kv
	}
	for k, p := range l.puts {
		d, deleted := l.dels[k]
		kv, ok := live[k]
		switch {
		case !deleted && l.tries[k]:
			// An unacknowledged delete may or may not have happened.
		case deleted && ok:
			miss("%s: deleted at %d (acknowledged), still there: %+v", k, d, kv)
		case !deleted && (!ok || kv.Value != p.value || kv.ModRevision != p.rev || kv.CreateRevision != p.rev || kv.Version != 1):
			miss("%s: put %q at %d (acknowledged), found %+v (present %v)", k, p.value, p.rev, kv, ok)
		}
		if p.rev >= from && !has(p.rev, Put, k) {
			miss("%s: the PUT at %d is not in the history", k, p.rev)
		}
		if deleted && d >= from && !has(d, Delete, k) {
			miss("%s: the DELETE at %d is not in the history (etcd#18089, etcd#19179)", k, d)
		}
	}
	// Leases: an acknowledged grant is there unless a revoke was tried; an
	// acknowledged revoke took the lease and its keys; a revoke cut by the
	// crash took both or neither.
	table := map[int64]bool{}
	for _, ls := range s.Leases() {
		table[ls.ID] = true
	}
	for id := range l.grants {
		_, revoked := l.revokes[id]
		switch {
		case revoked && table[id]:
			miss("lease %d: revoked (acknowledged), still in the table", id)
		case !l.ltries[id] && !table[id]:
			miss("lease %d: granted (acknowledged), not in the table", id)
		}
	}
	for k, p := range l.leasePut {
		kv, ok := live[k]
		_, revoked := l.revokes[p.lease]
		switch {
		case revoked && ok:
			miss("%s: its lease %d was revoked (acknowledged), still there", k, p.lease)
		case !revoked && table[p.lease] && (!ok || kv.Value != p.value || kv.ModRevision != p.rev || kv.Lease != p.lease):
			miss("%s: put %q at %d with lease %d (acknowledged, lease live), found %+v (present %v)", k, p.value, p.rev, p.lease, kv, ok)
		case !table[p.lease] && ok:
			miss("%s: its lease %d is gone, the key is not: a revoke was half done", k, p.lease)
		}
	}
	// The index agrees with the records: the state at the compact revision
	// plus the events after it is the current state.
	if c >= 1 {
		at, err := s.Range(ctx, RangeRequest{Key: "\x00", RangeEnd: "\x00", Revision: c})
		if err != nil {
			return lost, err
		}
		state := map[string]KeyValue{}
		for _, kv := range at.KVs {
			state[kv.Key] = kv
		}
		for _, e := range evs {
			if e.KV.ModRevision <= c {
				continue
			}
			if e.Type == Delete {
				delete(state, e.KV.Key)
			} else {
				state[e.KV.Key] = e.KV
			}
		}
		if len(state) != len(live) {
			return lost, fmt.Errorf("state at %d plus the history has %d keys, a read of the current revision %d", c, len(state), len(live))
		}
		for k, kv := range state {
			if live[k] != kv {
				return lost, fmt.Errorf("%s: %+v from the history, %+v from a read", k, kv, live[k])
			}
		}
	}
	if len(errs) > 0 {
		return lost, fmt.Errorf("%d acknowledged writes lost, e.g.:\n%s", lost, strings.Join(errs, "\n"))
	}
	return 0, nil
}
