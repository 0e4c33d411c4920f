// Package kine holds the conformance test of kine (github.com/k3s-io/kine,
// the version tests/kinetest pins) over SQLite: the conform workload as the
// Kubernetes apiserver drives it, checked under kine's profile, with the
// verdict docs/FINDINGS.md documents. It lives in the tests module so that
// the root module, which third parties import, does not require kine.
package kine
