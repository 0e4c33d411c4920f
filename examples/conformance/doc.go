// Package conformance is an example module: it checks an embedded etcd with
// watchspec's store conformance helper (conform/conformtest) and client-go's
// SharedIndexInformer with its informer helper (conform/informertest), each
// from go test in a few lines — store_test.go and informer_test.go — and
// shows that both helpers fail on a broken store and a broken informer
// (broken_test.go). It is a module of its own, so that the dependencies
// it needs (etcd's server, for the embedded etcd) are not watchspec's.
//
//	cd examples/conformance && GOWORK=off go test ./...
package conformance
