package conformance

import (
	"net/url"
	"testing"

	"github.com/watchspec/watchspec/conform/conformtest"
	"go.etcd.io/etcd/server/v3/embed"
)

// An embedded etcd (startEtcd, below) passes watchspec's conformance workloads. SPEC §2–§3.
func TestEtcdConforms(t *testing.T) {
	conformtest.TestStore(t, conformtest.Store{Endpoints: []string{startEtcd(t)}, SingleServer: true})
}

func startEtcd(t *testing.T) string {
	cfg := embed.NewConfig()
	cfg.Dir, cfg.LogLevel = t.TempDir(), "error"
	client, peer := url.URL{Scheme: "http", Host: freePort(t)}, url.URL{Scheme: "http", Host: freePort(t)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	<-e.Server.ReadyNotify()
	return client.String()
}
