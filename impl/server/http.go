package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/watchspec/watchspec/impl/mvcc"
)

// healthTimeout bounds the read of a health check: etcd's
// ServerConfig.ReqTimeout with its defaults (5 s + 2 × 1 s election).
const healthTimeout = 7 * time.Second

// HTTPHandler returns what the server answers over HTTP on its client
// port, as etcd does there (embed/etcd.go serveClients, etcdhttp/):
//
//   - GET /health: {"health":"true","reason":""} with 200, or
//     {"health":"false","reason":"..."} with 503 when an alarm is raised
//     ("ALARM NOSPACE", "ALARM CORRUPT", "ALARM UNKNOWN"; ?exclude=NOSPACE
//     ignores that alarm, and may be repeated) or when a read fails ("RANGE
//     ERROR:etcdserver: server stopped" once the server stops).
//     ?serializable=true is accepted (it skips etcd's leader check; there
//     is always a leader here).
//   - GET /livez, /readyz: etcd's check lists ("ok", or the failed checks
//     with 503; ?verbose lists every check, ?exclude=NAME skips one,
//     /readyz/NAME runs one): livez serializable_read; readyz
//     data_corruption (no CORRUPT alarm), linearizable_read,
//     non_learner, serializable_read.
//   - GET /version: {"etcdserver":"3.7.3","etcdcluster":"3.7.0","storage":"3.7.0"}
//     (Options.Version, and its major.minor.0).
//   - GET /metrics: Prometheus metrics (see [Metrics]).
//
// Other methods are 405 with "Allow: GET", as in etcd.
func (s *Server) HTTPHandler() http.Handler {
	mux := s.newMux()
	mux.HandleFunc("/version", s.serveVersion)
	return mux
}

// MetricsHandler returns what etcd serves on a --listen-metrics-urls
// listener: /metrics, /health, /livez and /readyz (see HTTPHandler).
func (s *Server) MetricsHandler() http.Handler { return s.newMux() }

func (s *Server) newMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", s.metrics.Handler())
	mux.HandleFunc("/health", s.serveHealth)
	s.installChecks(mux, "livez", []healthCheck{{"serializable_read", s.readCheck}})
	s.installChecks(mux, "readyz", []healthCheck{
		{"data_corruption", s.alarmCheck(pb.AlarmType_CORRUPT)},
		{"linearizable_read", s.readCheck},
		{"non_learner", func(context.Context) error { return nil }},
		{"serializable_read", s.readCheck},
	})
	return mux
}

// healthStatus is etcdhttp.Health.
type healthStatus struct {
	Health string `json:"health"`
	Reason string `json:"reason"`
}

// serveHealth is etcd's /health (etcdhttp/health.go HandleHealth,
// NewHealthHandler): alarms, then the leader, then a read.
func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	excluded := r.URL.Query()["exclude"]
	h := s.checkHealth(r.Context(), excluded)
	d, _ := json.Marshal(h)
	if h.Health != "true" {
		s.metrics.healthFailures.Inc()
		http.Error(w, string(d), http.StatusServiceUnavailable)
		s.log.Warn("/health error", "output", string(d), "status-code", http.StatusServiceUnavailable)
		return
	}
	s.metrics.healthSuccess.Inc()
	w.WriteHeader(http.StatusOK)
	w.Write(d)
}

func (s *Server) checkHealth(ctx context.Context, excluded []string) healthStatus {
	for _, a := range s.Alarms() {
		if slices.Contains(excluded, a.Alarm.String()) {
			continue
		}
		reason := "ALARM UNKNOWN"
		switch a.Alarm {
		case pb.AlarmType_NOSPACE:
			reason = "ALARM NOSPACE"
		case pb.AlarmType_CORRUPT:
			reason = "ALARM CORRUPT"
		}
		return healthStatus{Health: "false", Reason: reason}
	}
	if err := s.readCheck(ctx); err != nil {
		return healthStatus{Health: "false", Reason: "RANGE ERROR:" + err.Error()}
	}
	return healthStatus{Health: "true"}
}

// readCheck is etcd's health read: a range of one key, keys only, as the
// server's own range (a server that is stopping fails it, as a stopped
// etcd does).
func (s *Server) readCheck(ctx context.Context) error {
	if s.quitCtx.Err() != nil {
		return fmt.Errorf("%s", rpctypes.ErrorDesc(rpctypes.ErrGRPCStopped))
	}
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	if _, err := s.st.Range(ctx, mvcc.RangeRequest{Key: "health", Limit: 1, KeysOnly: true}); err != nil {
		return fmt.Errorf("%s", rpctypes.ErrorDesc(toGRPCError(err)))
	}
	return nil
}

func (s *Server) alarmCheck(typ pb.AlarmType) func(context.Context) error {
	return func(context.Context) error {
		if s.raised(typ) {
			return fmt.Errorf("alarm activated: %s", typ)
		}
		return nil
	}
}

type healthCheck struct {
	name  string
	check func(context.Context) error
}

// installChecks serves /kind and /kind/NAME for the checks, as etcd's
// CheckRegistry (etcdhttp/health.go) does; the checks run in name order
// (etcd's in map order).
func (s *Server) installChecks(mux *http.ServeMux, kind string, checks []healthCheck) {
	run := func(w http.ResponseWriter, r *http.Request, which []healthCheck) {
		if !getOnly(w, r) {
			return
		}
		var out strings.Builder
		failed := false
		for _, c := range which {
			status := "success"
			if err := c.check(r.Context()); err != nil {
				fmt.Fprintf(&out, "[-]%s failed: %v\n", c.name, err)
				failed, status = true, "error"
			} else {
				fmt.Fprintf(&out, "[+]%s ok\n", c.name)
			}
			v := 0.0
			if status == "success" {
				v = 1
			}
			s.metrics.healthCheck.WithLabelValues(kind, c.name).Set(v)
			s.metrics.healthChecks.WithLabelValues(kind, c.name, status).Inc()
		}
		if failed {
			http.Error(w, out.String(), http.StatusServiceUnavailable)
			s.log.Error("Health check error", "path", r.URL.Path, "reason", out.String(), "status-code", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if _, ok := r.URL.Query()["verbose"]; ok {
			fmt.Fprint(w, out.String())
		}
		fmt.Fprint(w, "ok\n")
	}
	mux.HandleFunc("/"+kind, func(w http.ResponseWriter, r *http.Request) {
		excluded := r.URL.Query()["exclude"]
		var which []healthCheck
		for _, c := range checks {
			if !slices.Contains(excluded, c.name) {
				which = append(which, c)
			}
		}
		run(w, r, which)
	})
	for _, c := range checks {
		mux.HandleFunc("/"+kind+"/"+c.name, func(w http.ResponseWriter, r *http.Request) {
			run(w, r, []healthCheck{c})
		})
	}
}

// serveVersion is etcd's /version (etcdhttp/version.go).
func (s *Server) serveVersion(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	cv := clusterVersion(s.opts.Version)
	b, _ := json.Marshal(struct {
		Server  string `json:"etcdserver"`
		Cluster string `json:"etcdcluster"`
		Storage string `json:"storage"`
	}{s.opts.Version, cv, cv})
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// clusterVersion is the cluster and storage version a member of version v
// reports once the cluster has settled: major.minor.0.
func clusterVersion(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1] + ".0"
}

// getOnly answers 405 to anything but GET, as etcd's handlers do.
func getOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet {
		return true
	}
	w.Header().Set("Allow", http.MethodGet)
	http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
	return false
}
