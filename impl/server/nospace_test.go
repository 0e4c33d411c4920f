package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/watchspec/watchspec/impl/mvcc"
)

// fullFS is the operating system's file system for the store's log, on a
// disk that can be made full: then every write fails with ENOSPC and
// writes nothing, as on a full disk.
type fullFS struct {
	mvcc.OSFS
	full atomic.Bool
}

func (fs *fullFS) OpenFile(name string, flag int, perm os.FileMode) (mvcc.File, error) {
	f, err := fs.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &fullFile{File: f, fs: fs, name: name}, nil
}

type fullFile struct {
	mvcc.File
	fs   *fullFS
	name string
}

func (f *fullFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.full.Load() {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: syscall.ENOSPC}
	}
	return f.File.WriteAt(p, off)
}

// Issue 17 acceptance: on a full disk the NOSPACE alarm is raised, puts fail
// with etcd's error (ErrGRPCNoSpace), `alarm list`, `endpoint status` and
// /health show it, reads and deletes go on, and once space is freed and the
// alarm disarmed (etcdctl alarm disarm) writes resume — without a restart,
// end to end through gRPC, and with every acknowledged write kept. Once
// through the store's file seam (a log that runs out of space), once on a
// real 8 MiB tmpfs when the test may mount one (root).
func TestDiskFull(t *testing.T) {
	t.Run("file seam", func(t *testing.T) {
		fs := &fullFS{}
		opts := testOptions()
		opts.Store.KV.FS = fs
		r := startTest(t, opts)
		diskFull(t, r, func() { fs.full.Store(true) }, func() { fs.full.Store(false) })
	})
	t.Run("tmpfs", func(t *testing.T) {
		mnt := t.TempDir()
		if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=8m"); err != nil {
			t.Skipf("cannot mount a tmpfs (needs root): %v", err)
		}
		t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
		filler := filepath.Join(mnt, "filler")
		if err := os.WriteFile(filler, make([]byte, 5<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		opts := Options{}
		opts.Store.KV.CheckpointBytes = 64 << 10 // the data file grows too
		r, err := Start(filepath.Join(mnt, "data"), "127.0.0.1:0", opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		// The filler leaves about 3 MiB, which the puts fill; removing it
		// frees more than the store holds, so that the checkpoint retried
		// after the disarm has room.
		diskFull(t, r, func() {}, func() {
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func diskFull(t *testing.T, r *Running, fill, free func()) {
	ctx := testCtx(t)
	cli := newClient(t, r.Endpoint())
	acked := map[string]string{}
	put := func(k, v string) error {
		_, err := cli.Put(ctx, k, v)
		if err == nil {
			acked[k] = v
		}
		return err
	}
	if err := put("before", "v"); err != nil {
		t.Fatal(err)
	}
	fill()
	val := strings.Repeat("x", 32<<10)
	var full error
	for i := 0; i < 1000 && full == nil; i++ {
		full = put(fmt.Sprintf("k%04d", i), val)
	}
	t.Logf("%d puts acknowledged before the disk was full", len(acked))
	isNoSpace := func(err error) bool {
		return errors.Is(err, rpctypes.ErrNoSpace) && status.Code(err2status(err)) == codes.ResourceExhausted &&
			err.Error() == "etcdserver: mvcc: database space exceeded"
	}
	if !isNoSpace(full) {
		t.Fatalf("filling the disk: %v, want etcd's ErrNoSpace (ResourceExhausted, \"etcdserver: mvcc: database space exceeded\")", full)
	}
	self := &pb.AlarmMember{MemberID: DefaultMemberID, Alarm: pb.AlarmType_NOSPACE}
	checkAlarms := func(when string, want ...*pb.AlarmMember) {
		t.Helper()
		al, err := cli.AlarmList(ctx)
		if err != nil {
			t.Fatalf("%s: alarm list: %v", when, err)
		}
		if fmt.Sprint(al.Alarms) != fmt.Sprint(want) {
			t.Errorf("%s: alarm list %v, want %v", when, al.Alarms, want)
		}
		st, err := cli.Status(ctx, r.Endpoint())
		if err != nil {
			t.Fatalf("%s: status: %v", when, err)
		}
		var errs []string
		for _, a := range want {
			errs = append(errs, fmt.Sprintf("memberID:%d alarm:%s", a.MemberID, a.Alarm))
		}
		if fmt.Sprint(st.Errors) != fmt.Sprint(errs) {
			t.Errorf("%s: status errors %q, want %q", when, st.Errors, errs)
		}
	}
	checkHealth := func(when, query string, code int, want string) {
		t.Helper()
		resp, err := http.Get(r.Endpoint() + "/health" + query)
		if err != nil {
			t.Fatalf("%s: GET /health: %v", when, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var h healthStatus
		if resp.StatusCode != code || json.Unmarshal(body, &h) != nil || h.Health+" "+h.Reason != want {
			t.Errorf("%s: GET /health%s: %d %q, want %d and %q", when, query, resp.StatusCode, body, code, want)
		}
	}
	checkAlarms("disk full", self)
	checkHealth("disk full", "", http.StatusServiceUnavailable, "false ALARM NOSPACE")
	checkHealth("disk full", "?exclude=NOSPACE", http.StatusOK, "true ")
	if g, err := cli.Get(ctx, "before"); err != nil || len(g.Kvs) != 1 {
		t.Fatalf("a read while the disk is full: %v %v", g, err)
	}

	free()
	if err := put("after-free", "v"); !isNoSpace(err) {
		t.Fatalf("a put once space is freed, the alarm still raised: %v, want ErrNoSpace (until the alarm is disarmed, as in etcd)", err)
	}
	_, err := cli.Txn(ctx).If().Then(clientv3.OpGet("before")).Else(clientv3.OpPut("else", "v")).Commit()
	if !isNoSpace(err) {
		t.Fatalf("a txn with a put in its else branch, alarm raised: %v, want ErrNoSpace", err)
	}
	if d, err := cli.Delete(ctx, "before"); err != nil || d.Deleted != 1 {
		t.Fatalf("a delete while NOSPACE is raised (etcd lets deletes through to free space): %v %v", d, err)
	}
	delete(acked, "before")
	checkAlarms("space freed, not disarmed", self)

	dis, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: DefaultMemberID, Alarm: pb.AlarmType_NOSPACE})
	if err != nil || fmt.Sprint(dis.Alarms) != fmt.Sprint([]*pb.AlarmMember{self}) {
		t.Fatalf("alarm disarm: %v %v, want %v", dis, err, self)
	}
	for i := range 10 {
		if err := put(fmt.Sprint("after-", i), val); err != nil {
			t.Fatalf("a put after space was freed and the alarm disarmed: %v", err)
		}
	}
	checkAlarms("disarmed")
	checkHealth("disarmed", "", http.StatusOK, "true ")
	all, err := cli.Get(ctx, "", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Kvs) != len(acked) {
		t.Errorf("%d keys, %d acknowledged", len(all.Kvs), len(acked))
	}
	for _, kv := range all.Kvs {
		if v, ok := acked[string(kv.Key)]; !ok || v != string(kv.Value) {
			t.Errorf("%s: not as acknowledged", kv.Key)
		}
	}
}
