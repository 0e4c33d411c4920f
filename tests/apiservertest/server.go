// Package apiservertest runs a real Kubernetes apiserver in-process for
// tests: k8s.io/apiserver's generic server (v0.37.2) with its real HTTP
// handler chain, authentication and authorization, the generic registry,
// the real watch cache (cacher) and the real etcd3 storage, serving one
// resource over TLS on a loopback port, so that client-go talks to it over
// TCP as to any cluster. Its etcd is whatever endpoint it is given: a real
// etcd (internal/etcdtest) or watchspec's reference server (impl/server,
// as `watchspec serve` runs it).
//
// The resource is the apiserver's own example type, example.apiserver.k8s.io/v1
// pods (k8s.io/apiserver/pkg/apis/example), served as a ConfigMap or a
// PodTemplate is by kube-apiserver: namespaced, no TTL (so no etcd leases),
// no controllers, a DELETE answered with a Status rather than the object
// (genericregistry.Store.ReturnDeletedObject false).
//
// It imports k8s.io/apiserver: nothing outside the tests may import it (it
// is meant to move into a test module of its own, with the tests that use
// it).
package apiservertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/apis/example/install"
	examplev1 "k8s.io/apiserver/pkg/apis/example/v1"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/dynamic"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// Version is the k8s.io/apiserver version the server runs.
const Version = "0.37.2"

// GVR is the resource the server serves: example.apiserver.k8s.io/v1 pods.
var GVR = schema.GroupVersionResource{Group: examplev1.GroupName, Version: "v1", Resource: "pods"}

// User and Token are the test's identity: the server authenticates the
// bearer token Token as User, and authorizes User (and its own loopback
// client) to do anything; every other request is refused.
const (
	User  = "watchspec-conform"
	Token = "watchspec-test-token"
)

var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

func init() {
	install.Install(scheme)
	// The example group registers no list kinds; a served resource needs them.
	scheme.AddKnownTypes(example.SchemeGroupVersion, &example.PodList{})
	scheme.AddKnownTypes(examplev1.SchemeGroupVersion, &examplev1.PodList{})
	// The options of every group are read as v1 (as sample-apiserver does).
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	scheme.AddUnversionedTypes(unversioned, &metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
}

// Options shape a server.
type Options struct {
	// Etcd are the etcd-v3 endpoints of its storage (required).
	Etcd []string
	// Name names the server in its errors.
	Name string
	// WatchCacheOff serves every list and watch from etcd (the apiserver's
	// --watch-cache=false).
	WatchCacheOff bool
}

// Server is a running apiserver.
type Server struct {
	// URL is where it serves (https://127.0.0.1:PORT).
	URL string
	// CA is the PEM of the certificate authority of its serving certificate.
	CA []byte

	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

// Start starts a server over the etcd at o.Etcd and waits until it is
// ready (its /readyz answers 200).
func Start(ctx context.Context, o Options) (*Server, error) {
	if len(o.Etcd) == 0 {
		return nil, errors.New("apiservertest: no etcd endpoints")
	}
	cfg := genericapiserver.NewConfig(codecs)
	cfg.EffectiveVersion = basecompatibility.NewEffectiveVersionFromString("1.37", "", "")
	// Serving: TLS on a loopback port, a self-signed certificate.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ss := genericoptions.NewSecureServingOptions()
	ss.Listener = ln
	ss.BindAddress = net.ParseIP("127.0.0.1")
	ss.BindPort = ln.Addr().(*net.TCPAddr).Port
	ss.ServerCert.CertDirectory, ss.ServerCert.PairName = "", "" // in memory, not in the working directory
	if err := ss.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		ln.Close()
		return nil, err
	}
	ca, _ := ss.ServerCert.GeneratedCert.CurrentCertKeyContent()
	if err := ss.WithLoopback().ApplyTo(&cfg.SecureServing, &cfg.LoopbackClientConfig); err != nil {
		ln.Close()
		return nil, err
	}
	// Authentication: the static token; authorization: the test's user
	// and the server's own loopback client (AuthorizeClientBearerToken
	// adds its token, in the privileged group).
	cfg.Authentication.Authenticator = authenticatorfactory.NewFromTokens(map[string]*user.DefaultInfo{
		Token: {Name: User, UID: "watchspec", Groups: []string{user.AllAuthenticated}},
	}, nil)
	cfg.Authorization.Authorizer = authorizer.AuthorizerFunc(authorize)
	genericapiserver.AuthorizeClientBearerToken(cfg.LoopbackClientConfig, &cfg.Authentication, &cfg.Authorization)
	// OpenAPI: server-side apply needs models of the served types; the
	// /openapi endpoints are not served.
	cfg.SkipOpenAPIInstallation = true
	namer := openapinamer.NewDefinitionNamer(scheme)
	cfg.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openAPIDefinitions, namer)
	cfg.OpenAPIConfig.Info.Title, cfg.OpenAPIConfig.Info.Version = "watchspec apiservertest", Version
	cfg.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openAPIDefinitions, namer)
	cfg.OpenAPIV3Config.Info.Title, cfg.OpenAPIV3Config.Info.Version = "watchspec apiservertest", Version
	// Storage: etcd3 under /registry, with the watch cache; no compaction
	// by the apiserver (a test that compacts does it itself), and nothing
	// with a TTL, so no leases.
	sc := storagebackend.NewDefaultConfig("/registry", codecs.LegacyCodec(examplev1.SchemeGroupVersion))
	sc.Transport.ServerList = o.Etcd
	sc.CompactionInterval = 0
	sc.EncodeVersioner = runtime.NewMultiGroupVersioner(examplev1.SchemeGroupVersion, schema.GroupKind{Group: examplev1.GroupName})
	etcdOpts := genericoptions.NewEtcdOptions(sc)
	etcdOpts.EnableWatchCache = !o.WatchCacheOff
	if err := etcdOpts.ApplyTo(cfg); err != nil {
		ln.Close()
		return nil, err
	}

	server, err := cfg.Complete(nil).New("watchspec-apiservertest", genericapiserver.NewEmptyDelegate())
	if err != nil {
		ln.Close()
		return nil, err
	}
	store, err := newPodStorage(cfg.RESTOptionsGetter)
	if err != nil {
		ln.Close()
		return nil, err
	}
	group := genericapiserver.NewDefaultAPIGroupInfo(examplev1.GroupName, scheme, metav1.ParameterCodec, codecs)
	group.VersionedResourcesStorageMap["v1"] = map[string]rest.Storage{"pods": store}
	if err := server.InstallAPIGroup(&group); err != nil {
		ln.Close()
		return nil, err
	}
	prepared := server.PrepareRun()

	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Server{URL: "https://" + ln.Addr().String(), CA: ca, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		err := prepared.RunWithContext(rctx)
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
	}()
	if err := s.waitReady(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("apiservertest %s: %w", o.Name, err)
	}
	return s, nil
}

// authorize allows the test's user and the privileged group (the server's
// loopback client) everything, and nobody else anything.
func authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	u := a.GetUser()
	if u == nil {
		return authorizer.DecisionNoOpinion, "no user", nil
	}
	if u.GetName() == User {
		return authorizer.DecisionAllow, "", nil
	}
	for _, g := range u.GetGroups() {
		if g == user.SystemPrivilegedGroup {
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionNoOpinion, "only " + User + " may", nil
}

// waitReady polls /readyz until it answers 200.
func (s *Server) waitReady(ctx context.Context) error {
	cfg := s.Config()
	transport, err := restclient.TransportFor(cfg)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: transport, Timeout: 5 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for {
		select {
		case <-s.done:
			s.mu.Lock()
			defer s.mu.Unlock()
			return fmt.Errorf("the server stopped: %v", s.err)
		default:
		}
		resp, err := client.Get(s.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not ready after 60 s: %s", last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Config returns a client configuration for the test's user, over TCP and
// TLS, as a kubeconfig would give it.
func (s *Server) Config() *restclient.Config {
	return &restclient.Config{
		Host:            s.URL,
		BearerToken:     Token,
		TLSClientConfig: restclient.TLSClientConfig{CAData: append([]byte(nil), s.CA...)},
		QPS:             -1, // no client-side rate limit
	}
}

// Dynamic returns a dynamic client of the served resource's namespace ns.
func (s *Server) Dynamic(ns string) (dynamic.ResourceInterface, error) {
	c, err := dynamic.NewForConfig(s.Config())
	if err != nil {
		return nil, err
	}
	return c.Resource(GVR).Namespace(ns), nil
}

// WriteKubeconfig writes a kubeconfig file for the test's user.
func (s *Server) WriteKubeconfig(path string) error {
	c := clientcmdapi.NewConfig()
	c.Clusters["apiservertest"] = &clientcmdapi.Cluster{Server: s.URL, CertificateAuthorityData: s.CA}
	c.AuthInfos[User] = &clientcmdapi.AuthInfo{Token: Token}
	c.Contexts["apiservertest"] = &clientcmdapi.Context{Cluster: "apiservertest", AuthInfo: User}
	c.CurrentContext = "apiservertest"
	b, err := clientcmd.Write(*c)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// Close stops the server and waits until it stopped.
func (s *Server) Close() {
	s.cancel()
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
	}
}

// --- The resource ---

// podStrategy is the registry's strategy for example pods: namespaced,
// nothing to validate or default (the model's value is an annotation).
type podStrategy struct{ runtime.ObjectTyper }

func (podStrategy) GenerateName(base string) string                                  { return base + "x" }
func (podStrategy) NamespaceScoped() bool                                            { return true }
func (podStrategy) PrepareForCreate(context.Context, runtime.Object)                 {}
func (podStrategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}
func (podStrategy) Validate(context.Context, runtime.Object) field.ErrorList         { return nil }
func (podStrategy) WarningsOnCreate(context.Context, runtime.Object) []string        { return nil }
func (podStrategy) AllowCreateOnUpdate(context.Context) bool                         { return false }
func (podStrategy) AllowUnconditionalUpdate(context.Context) bool                    { return true }
func (podStrategy) Canonicalize(runtime.Object)                                      {}
func (podStrategy) ValidateUpdate(context.Context, runtime.Object, runtime.Object) field.ErrorList {
	return nil
}
func (podStrategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

func newPodStorage(getter generic.RESTOptionsGetter) (*genericregistry.Store, error) {
	s := podStrategy{scheme}
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &example.Pod{} },
		NewListFunc:               func() runtime.Object { return &example.PodList{} },
		DefaultQualifiedResource:  example.Resource("pods"),
		SingularQualifiedResource: example.Resource("pod"),
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		TableConvertor:            rest.NewDefaultTableConvertor(example.Resource("pods")),
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: getter, AttrFunc: storage.DefaultNamespaceScopedAttr}); err != nil {
		return nil, err
	}
	return store, nil
}

// openAPIDefinitions gives the served kinds a schema that keeps every field
// (x-kubernetes-preserve-unknown-fields, as a CRD without a schema):
// server-side apply's field manager needs a model per kind, nothing more.
func openAPIDefinitions(common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	open := common.OpenAPIDefinition{Schema: spec.Schema{
		SchemaProps:      spec.SchemaProps{Type: []string{"object"}},
		VendorExtensible: spec.VendorExtensible{Extensions: spec.Extensions{"x-kubernetes-preserve-unknown-fields": true}},
	}}
	defs := map[string]common.OpenAPIDefinition{}
	for _, name := range []string{"Pod", "PodList"} {
		defs["k8s.io/apiserver/pkg/apis/example/v1."+name] = open
		defs["io.k8s.apiserver.pkg.apis.example.v1."+name] = open
	}
	for _, name := range []string{"Status", "APIVersions", "APIGroupList", "APIGroup", "APIResourceList", "WatchEvent", "DeleteOptions"} {
		defs["k8s.io/apimachinery/pkg/apis/meta/v1."+name] = open
		defs["io.k8s.apimachinery.pkg.apis.meta.v1."+name] = open
	}
	return defs
}
