package record_test

import (
	"bytes"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/watchspec/watchspec/internal/etcdtest"
	"github.com/watchspec/watchspec/traces"
	"github.com/watchspec/watchspec/traces/record"
)

// recordingEtcd starts an embedded etcd (one member, etcdtest.Version), a
// client of it, and a recorder writing into buf a trace from revision 1
// with nothing compacted, its Tool named tool. stop closes the client and
// etcd.
func recordingEtcd(t *testing.T, tool string) (cli *clientv3.Client, rec *record.Recorder, buf *bytes.Buffer, stop func()) {
	t.Helper()
	cluster, err := etcdtest.Start(etcdtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cli, err = clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		cluster.Close()
		t.Fatal(err)
	}
	stop = func() {
		cli.Close()
		cluster.Close()
	}
	buf = new(bytes.Buffer)
	never := int64(-1)
	w, err := traces.NewWriter(buf, traces.Header{System: "etcd", SystemVersion: etcdtest.Version,
		Tool: tool, UniqueValues: true, BaseRevision: 1, BaseCompactRevision: &never})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	return cli, record.New(w), buf, stop
}
