package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-logr/logr"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/watchspec/watchspec/conform/kube"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/traces"
)

// kubeFlags are the flags of `watchspec conform --kubeconfig`: the
// Kubernetes workload through client-go against an apiserver.
type kubeFlags struct {
	kubeconfig, context string
	resource, namespace string
	keepNamespace       bool
	exclusive           bool
}

// addKubeFlags adds the Kubernetes flags to conform's flag set.
func addKubeFlags(fs *flag.FlagSet) *kubeFlags {
	k := &kubeFlags{}
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "run the Kubernetes workload against the apiserver of kubeconfig `FILE` instead of an etcd endpoint (docs/CONFORMANCE.md)")
	fs.StringVar(&k.context, "kube-context", "", "with --kubeconfig: the kubeconfig context to use (default: its current context)")
	fs.StringVar(&k.resource, "resource", "v1/podtemplates", "with --kubeconfig: the namespaced resource to write, as `[GROUP/]VERSION/RESOURCE`")
	fs.StringVar(&k.namespace, "namespace", "", "with --kubeconfig: the run's namespace, which must hold no object of the resource (default: watchspec-conform-SEED, created and deleted by the run)")
	fs.BoolVar(&k.keepNamespace, "keep-namespace", false, "with --kubeconfig: keep the namespace the run created")
	fs.BoolVar(&k.exclusive, "exclusive", false, "with --kubeconfig: nothing but the run writes to the apiserver's etcd (a dedicated test apiserver); bounds what reads may return")
	return k
}

// parseResource reads [GROUP/]VERSION/RESOURCE.
func parseResource(s string) (k8sschema.GroupVersionResource, error) {
	parts := strings.Split(s, "/")
	switch {
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		return k8sschema.GroupVersionResource{Version: parts[0], Resource: parts[1]}, nil
	case len(parts) == 3 && parts[0] != "" && parts[1] != "" && parts[2] != "":
		return k8sschema.GroupVersionResource{Group: parts[0], Version: parts[1], Resource: parts[2]}, nil
	}
	return k8sschema.GroupVersionResource{}, fmt.Errorf("--resource %q is not [GROUP/]VERSION/RESOURCE (e.g. v1/podtemplates, example.com/v1/widgets)", s)
}

// runConformKube is `watchspec conform --kubeconfig`: the Kubernetes
// workload (conform/kube) against an apiserver, checked against SPEC §4–§5
// and reported as etcd conformance is.
func runConformKube(k *kubeFlags, f *conformFlags, fs *flag.FlagSet, stdout, stderr io.Writer) int {
	for _, name := range []string{"endpoints", "restart-every", "compact-every", "workload", "profile"} {
		if flagSet(fs, name) {
			fmt.Fprintf(stderr, "watchspec conform: --%s is for etcd endpoints; it cannot be used with --kubeconfig\n", name)
			return 2
		}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "watchspec conform: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if f.duration <= 0 || f.timeout <= 0 || f.clients < 1 || f.watchers < 0 {
		fmt.Fprintln(stderr, "watchspec conform: --duration and --timeout must be positive, --clients at least 1, --watchers not negative")
		return 2
	}
	if f.duration > 4*time.Minute {
		fmt.Fprintf(stderr, "watchspec conform: warning: a run of %v may outlast the apiserver's etcd compaction interval (default 5m), which the recording cannot see\n", f.duration)
	}
	gvr, err := parseResource(k.resource)
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
		return 2
	}
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: k.kubeconfig}
	rest, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.context}).ClientConfig()
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: reading --kubeconfig %s: %v\n", k.kubeconfig, err)
		return 2
	}
	if f.seed == 0 {
		f.seed = time.Now().UnixNano() % 1_000_000_007
	}
	progress := func(string, ...any) {}
	if !f.quiet {
		progress = progressTo(stderr)
	}
	klog.SetLogger(logr.Discard()) // client-go logs every watch it restarts
	// Ctrl-C stops the workload and reports what was recorded; a second exits at once.
	intr := catchInterrupts(stderr)
	defer intr.stop()
	ctx := intr.ctx

	dir, policy, err := reportDir(f.report) // report.go: where, and which old reports go
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
		return 2
	}
	out, err := createTrace(dir)
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
		return 2
	}
	// conform's defaults are for an etcd endpoint; the Kubernetes
	// workload's own (conform/kube) apply unless a flag says otherwise.
	cfg := kube.Config{REST: rest, Resource: gvr, Namespace: k.namespace, KeepNamespace: k.keepNamespace,
		Seed: f.seed, Exclusive: k.exclusive, System: "Kubernetes apiserver at " + rest.Host, Progress: progress}
	if flagSet(fs, "duration") {
		cfg.Duration = f.duration
	}
	if flagSet(fs, "clients") {
		cfg.Writers, cfg.Readers = f.clients, f.clients
	}
	if flagSet(fs, "watchers") {
		cfg.Watchers = f.watchers
		if f.watchers == 0 {
			cfg.Watchers = -1
		}
	}
	progress("seed %d: the Kubernetes workload (%s) against %s", f.seed, gvr, rest.Host)
	progress("report directory %s", dir)
	intr.during("recording")
	stats, err := kube.Record(ctx, cfg, out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
		return 2
	}
	progress("recorded %v", stats)
	intr.during("checking")
	t, err := traces.ReadFile(out.path)
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: reading back the trace: %v\n", err)
		return 2
	}
	res, err := linearizability.Check(t, linearizability.Options{Timeout: f.timeout, Progress: progress, Profile: linearizability.FullConformance})
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "%v\n\n", stats)
	reproduce := fmt.Sprintf("watchspec conform --kubeconfig FILE --seed %d --resource %s --duration %v --clients %d --watchers %d",
		f.seed, k.resource, f.duration, f.clients, f.watchers)
	status, err := conformReport(stdout, dir, policy, res, t, reproduce, intr.report()) // report.go
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
		return 2
	}
	return status
}
