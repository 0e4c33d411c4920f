package conformtest_test

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/watchspec/watchspec/conform/conformtest"
)

// A store's own test: the workloads run as subtests against the store at
// endpoint, through the caller's dial (TLS, credentials), with a restart
// hook; each violation fails the test naming its property.
func ExampleTestStore() {
	var t *testing.T // the *testing.T of your TestXxx
	endpoint := "https://127.0.0.1:2379"
	conformtest.TestStore(t, conformtest.Store{
		Endpoints: []string{endpoint},
		Dial: func(cfg clientv3.Config) (*clientv3.Client, error) {
			cfg.Username, cfg.Password = "root", "secret" // and cfg.TLS
			return clientv3.New(cfg)
		},
		Restart: func(ctx context.Context) error { return nil /* restart your store */ },
		Profile: "", // etcd's guarantees; "kine" for kine's allowances
	})
}
