// Package tree holds the test that guards the promises the README makes
// about the repository's shape: model/ imports only the standard library,
// impl/ never imports model/, and the root module (what third parties
// import) requires none of kine, k8s.io/apiserver and etcd's server, which
// only the tests module's harnesses need.
package tree
