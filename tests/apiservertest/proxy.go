package apiservertest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"

	restclient "k8s.io/client-go/rest"
)

// Mutant is a broken list, watch or bookmark behaviour that a [Proxy]
// injects between client-go and the apiserver: what a buggy apiserver (or
// a buggy layer in front of one) would send.
type Mutant string

const (
	// DropEvent drops the third change event of a watch from a
	// resourceVersion, and its bookmarks until its next change (SPEC §3.3
	// Reliable).
	DropEvent Mutant = "drop-watch-event"
	// StaleExact answers a list with resourceVersionMatch=Exact at N (and
	// no limit) with the list at N−3, relabelled N: stale data for an exact
	// read (SPEC §4.2 ListSnapshot).
	StaleExact Mutant = "stale-exact-list"
	// BookmarkAhead sends, in a watch from a resourceVersion, a bookmark
	// at the revision of its second change just before that change (SPEC
	// §3.6 Bookmarkable).
	BookmarkAhead Mutant = "bookmark-ahead-of-event"
)

// Proxy is a plain-HTTP reverse proxy in front of a [Server] that injects
// one [Mutant]. Clients reach it with [Proxy.Config].
type Proxy struct {
	URL    string
	mutant Mutant
	target *url.URL
	client *http.Client
	rp     *httputil.ReverseProxy
	srv    *http.Server

	mu      sync.Mutex
	claimed bool // a watch was chosen for the damage
	done    bool // the mutant did its damage
}

// NewProxy starts a proxy in front of s that injects m.
func NewProxy(s *Server, m Mutant) (*Proxy, error) {
	target, err := url.Parse(s.URL)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.CA) {
		return nil, fmt.Errorf("the server's CA does not parse")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{URL: "http://" + ln.Addr().String(), mutant: m, target: target, client: &http.Client{Transport: tr}}
	p.rp = httputil.NewSingleHostReverseProxy(target)
	p.rp.Transport = tr
	p.rp.FlushInterval = -1
	p.rp.ErrorLog = log.New(io.Discard, "", 0) // a client that gives up is no news
	p.srv = &http.Server{Handler: p}
	go p.srv.Serve(ln)
	return p, nil
}

// Config is a client configuration through the proxy.
func (p *Proxy) Config() *restclient.Config {
	return &restclient.Config{Host: p.URL, BearerToken: Token, QPS: -1}
}

// Damaged reports whether the mutant did its damage.
func (p *Proxy) Damaged() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Close stops the proxy.
func (p *Proxy) Close() { p.srv.Close() }

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r.Header.Set("Accept", "application/json") // bodies the proxy can read
	q := r.URL.Query()
	isWatch := q.Get("watch") == "true" || q.Get("watch") == "1"
	switch {
	case r.Method == http.MethodGet && isWatch && p.mutant != StaleExact:
		p.watch(w, r)
	case r.Method == http.MethodGet && !isWatch && p.mutant == StaleExact && q.Get("resourceVersionMatch") == "Exact":
		p.staleList(w, r)
	default:
		p.rp.ServeHTTP(w, r)
	}
}

// upstream sends r on to the apiserver.
func (p *Proxy) upstream(r *http.Request) (*http.Response, error) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host, out.Host = p.target.Scheme, p.target.Host, p.target.Host
	return p.client.Do(out)
}

// staleList serves an exact list at N with the data at N−3.
func (p *Proxy) staleList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n, err := strconv.ParseInt(q.Get("resourceVersion"), 10, 64)
	if err != nil || n <= 4 || q.Get("continue") != "" || q.Get("limit") != "" {
		p.rp.ServeHTTP(w, r)
		return
	}
	q.Set("resourceVersion", strconv.FormatInt(n-3, 10))
	r.URL.RawQuery = q.Encode()
	resp, err := p.upstream(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode == http.StatusOK {
		var list map[string]any
		if json.Unmarshal(body, &list) == nil {
			if md, ok := list["metadata"].(map[string]any); ok {
				md["resourceVersion"] = strconv.FormatInt(n, 10)
				body, _ = json.Marshal(list)
				p.mu.Lock()
				p.done = true
				p.mu.Unlock()
			}
		}
	}
	copyHeader(w.Header(), resp.Header)
	w.Header().Del("Content-Length")
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
}

// watch passes a watch stream through, event by event, and damages one
// watch from a resourceVersion (not a WatchList, whose initial events are
// no changes): the first to reach its third change (DropEvent) or its
// second (BookmarkAhead).
func (p *Proxy) watch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rv := q.Get("resourceVersion")
	candidate := rv != "" && rv != "0" && q.Get("sendInitialEvents") == ""
	resp, err := p.upstream(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	copyHeader(w.Header(), resp.Header)
	w.Header().Del("Content-Length")
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	dec := json.NewDecoder(resp.Body)
	changes := 0
	// dropping: this stream dropped a change and hides its bookmarks until
	// the next change shows the gap (a drop with nothing after it on the
	// stream is no damage: the next watch resumes before it).
	dropping := false
	defer func() {
		if dropping {
			p.mu.Lock()
			p.claimed = false
			p.mu.Unlock()
		}
	}()
	for {
		var ev map[string]any
		if err := dec.Decode(&ev); err != nil {
			return
		}
		typ, _ := ev["type"].(string)
		change := typ == "ADDED" || typ == "MODIFIED" || typ == "DELETED"
		switch {
		case dropping && typ == "BOOKMARK":
			continue
		case dropping && change:
			dropping = false
			p.damaged()
		case candidate && change:
			changes++
			if p.mutant == DropEvent && changes == 3 && p.claim() {
				dropping = true
				continue
			}
			if p.mutant == BookmarkAhead && changes == 2 && p.claim() {
				obj, _ := ev["object"].(map[string]any)
				md, _ := obj["metadata"].(map[string]any)
				bookmark := map[string]any{"type": "BOOKMARK", "object": map[string]any{
					"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": map[string]any{"resourceVersion": md["resourceVersion"]}}}
				if !p.write(w, flusher, bookmark) {
					return
				}
				p.damaged()
			}
		}
		if !p.write(w, flusher, ev) {
			return
		}
	}
}

// claim reserves the one damage the proxy does.
func (p *Proxy) claim() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.claimed {
		return false
	}
	p.claimed = true
	return true
}

func (p *Proxy) damaged() {
	p.mu.Lock()
	p.done = true
	p.mu.Unlock()
}

func (p *Proxy) write(w io.Writer, f http.Flusher, ev map[string]any) bool {
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(ev); err != nil {
		return false
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return false
	}
	if f != nil {
		f.Flush()
	}
	return true
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}
