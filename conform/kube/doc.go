// Package kube runs watchspec's Kubernetes conformance workload against any
// apiserver over HTTP — a cluster, kine under an apiserver, an aggregated
// API server — and records it as a trace (docs/TRACE_FORMAT.md, version 2,
// with the Kubernetes records), ready to be checked against docs/SPEC.md
// §4 (list and watch) and §5 (the informer contract) by
// linearizability.Check, as `watchspec conform --kubeconfig` does.
//
// It speaks through client-go as controllers do: the dynamic client for
// writes, lists and watches, and a SharedIndexInformer over a ListWatch of
// its own, so that every list and watch the informer makes is recorded. It
// imports client-go and apimachinery only (not the full clientset, not
// k8s.io/apiserver).
//
// Start with [Record]; docs/CONFORMANCE.md says what a run needs of the
// cluster (a namespace of its own, no other writer of the resource there,
// a run shorter than the apiserver's compaction interval).
package kube
