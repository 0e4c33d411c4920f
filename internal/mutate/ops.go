package mutate

// Operators returns every operator of the campaign: the semantic ones (etcd
// watch, key-value, lease, Kubernetes list and watch, informer), then the
// equivalence and weakening ones. The slice is new; the operators are shared.
func Operators() []*Operator {
	var out []*Operator
	for _, group := range [][]*Operator{watchOperators, kvOperators, leaseOperators, k8sOperators, informerOperators, equivalenceOperators, k8sEquivalenceOperators} {
		out = append(out, group...)
	}
	return out
}
