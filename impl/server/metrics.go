package server

import (
	"context"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"

	"github.com/watchspec/watchspec/impl/store"
)

// Metrics are a server's Prometheus metrics, served on /metrics. Their
// names, labels, help texts and buckets are etcd 3.7's wherever the meaning
// is the same (the citations are to server/ in etcd v3.7.1 and v3.7.3,
// which agree), so that etcd's dashboards and alerts work unchanged:
//
//   - gRPC requests: grpc_server_started_total, grpc_server_handled_total,
//     grpc_server_msg_received_total, grpc_server_msg_sent_total
//     (go-grpc-middleware's provider, as etcd's v3rpc/grpc.go uses it), and
//     with Options.ExtensiveMetrics grpc_server_handling_seconds (etcd's
//     --metrics=extensive); etcd_server_client_requests_total{type,
//     client_api_version} (v3rpc/interceptor.go);
//     etcd_network_client_grpc_sent_bytes_total and
//     _received_bytes_total (v3rpc/codec.go);
//   - request latency: etcd_server_request_duration_seconds{type, success}
//     (etcdserver/metrics.go), type Range, ReadonlyTxn, Put, DeleteRange,
//     Txn, Compaction or Alarm, measured from the handler's start;
//   - disk: etcd_disk_wal_fsync_duration_seconds (each fdatasync of the
//     store's write-ahead log), etcd_disk_backend_commit_duration_seconds
//     (each commit of its data file: checkpoints and compaction batches) —
//     only for a store opened with InstrumentStore's options (Start does);
//     etcd_mvcc_db_total_size_in_bytes, etcd_mvcc_db_total_size_in_use_in_bytes;
//   - store: etcd_debugging_mvcc_current_revision, _compact_revision;
//   - watches: etcd_debugging_mvcc_watch_stream_total, _watcher_total,
//     _slow_watcher_total (watches not synced: catching up or parked as
//     victims, as etcd's unsynced + victims);
//   - member: etcd_server_has_leader and etcd_server_is_leader (1: the
//     member is its own leader), etcd_server_id, etcd_server_version,
//     etcd_server_go_version, etcd_debugging_server_alarms{server_id,
//     alarm_type} (1 per alarm raised; this member's NOSPACE and CORRUPT
//     are always there, 0 when not raised);
//   - health: etcd_server_health_success, etcd_server_health_failures
//     (/health), etcd_server_healthcheck and etcd_server_healthchecks_total
//     (/livez, /readyz);
//   - watchspec's own, where etcd has no equivalent:
//     watchspec_mvcc_log_size_in_bytes (the write-ahead log's segments),
//     watchspec_mvcc_memory_records_in_bytes (records waiting for a
//     checkpoint), watchspec_mvcc_memory_waits_total (the times writers
//     waited for a checkpoint to make room in memory),
//     watchspec_mvcc_group_commits_total, watchspec_mvcc_checkpoints_total;
//   - the Go runtime and the process (go_*, process_*), as etcd's default
//     registry has them.
//
// A Metrics belongs to one Server. NewMetrics makes one; the Server that
// New makes without Options.Metrics has its own.
type Metrics struct {
	reg      *prometheus.Registry
	attached atomic.Bool

	walFsync      prometheus.Histogram
	backendCommit prometheus.Histogram

	requestDuration *prometheus.HistogramVec
	clientRequests  *prometheus.CounterVec
	sentBytes       prometheus.Counter
	receivedBytes   prometheus.Counter

	healthSuccess, healthFailures prometheus.Counter
	healthCheck                   *prometheus.GaugeVec
	healthChecks                  *prometheus.CounterVec

	grpc *grpcprom.ServerMetrics // set by New

	// The series the interceptors update on every call, looked up once:
	// a label lookup hashes its values and takes the vector's lock.
	durations [len(requestTypes)][2]atomic.Pointer[prometheus.Observer] // by requestType, then success
	apiCounts [2]atomic.Pointer[apiCount]                               // unary, stream: the client API version seen last
}

// apiCount is etcd_server_client_requests_total's series of one type and
// client API version.
type apiCount struct {
	version string
	c       prometheus.Counter
}

// requestTypes are the values of etcd_server_request_duration_seconds'
// type label (see requestType).
var requestTypes = [...]string{"Range", "Put", "DeleteRange", "ReadonlyTxn", "Txn", "Compaction", "Alarm"}

// countRequest counts a call of the client API version in
// etcd_server_client_requests_total.
func (m *Metrics) countRequest(ctx context.Context, stream bool) {
	v := clientAPIVersion(ctx)
	i, typ := 0, "unary"
	if stream {
		i, typ = 1, "stream"
	}
	c := m.apiCounts[i].Load()
	if c == nil || c.version != v {
		c = &apiCount{version: v, c: m.clientRequests.WithLabelValues(typ, v)}
		m.apiCounts[i].Store(c)
	}
	c.c.Inc()
}

// observeDuration observes a request of type requestTypes[typ].
func (m *Metrics) observeDuration(typ int, ok bool, seconds float64) {
	i := 0
	if ok {
		i = 1
	}
	p := &m.durations[typ][i]
	o := p.Load()
	if o == nil {
		obs := m.requestDuration.WithLabelValues(requestTypes[typ], strconv.FormatBool(ok))
		o = &obs
		p.Store(o)
	}
	(*o).Observe(seconds)
}

// NewMetrics returns the metrics of a server to come: pass them to the
// store with InstrumentStore before opening it, and to New in
// Options.Metrics.
//
//	m := server.NewMetrics()
//	var so store.Options
//	m.InstrumentStore(&so)
//	st, err := store.Open(dir, so)
//	srv := server.New(st, server.Options{Metrics: m})
func NewMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.walFsync = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "etcd", Subsystem: "disk", Name: "wal_fsync_duration_seconds",
		Help: "The latency distributions of fsync called by WAL.",
		// storage/wal/metrics.go: 1 ms to 8 s.
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
	m.backendCommit = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "etcd", Subsystem: "disk", Name: "backend_commit_duration_seconds",
		Help:    "The latency distributions of commit called by backend.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14), // storage/backend/metrics.go
	})
	m.requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "etcd", Subsystem: "server", Name: "request_duration_seconds",
		Help:    "Response latency distribution in seconds for each type.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14), // etcdserver/metrics.go
	}, []string{"type", "success"})
	m.clientRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "etcd", Subsystem: "server", Name: "client_requests_total",
		Help: "The total number of client requests per client version.",
	}, []string{"type", "client_api_version"})
	m.sentBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "etcd", Subsystem: "network", Name: "client_grpc_sent_bytes_total",
		Help: "The total number of bytes sent to grpc clients.",
	})
	m.receivedBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "etcd", Subsystem: "network", Name: "client_grpc_received_bytes_total",
		Help: "The total number of bytes received from grpc clients.",
	})
	m.healthSuccess = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "etcd", Subsystem: "server", Name: "health_success",
		Help: "The total number of successful health checks",
	})
	m.healthFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "etcd", Subsystem: "server", Name: "health_failures",
		Help: "The total number of failed health checks",
	})
	m.healthCheck = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "etcd", Subsystem: "server", Name: "healthcheck",
		Help: "The result of each kind of healthcheck.",
	}, []string{"type", "name"})
	m.healthChecks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "etcd", Subsystem: "server", Name: "healthchecks_total",
		Help: "The total number of each kind of healthcheck.",
	}, []string{"type", "name", "status"})
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.walFsync, m.backendCommit, m.requestDuration, m.clientRequests,
		m.sentBytes, m.receivedBytes,
		m.healthSuccess, m.healthFailures, m.healthCheck, m.healthChecks,
	)
	return m
}

// InstrumentStore sets the store options' duration hooks (OnLogSync,
// OnBackendCommit) to observe etcd_disk_wal_fsync_duration_seconds and
// etcd_disk_backend_commit_duration_seconds, keeping any hook already set.
func (m *Metrics) InstrumentStore(o *store.Options) {
	logSync, commit := o.KV.OnLogSync, o.KV.OnBackendCommit
	o.KV.OnLogSync = func(d time.Duration) {
		m.walFsync.Observe(d.Seconds())
		if logSync != nil {
			logSync(d)
		}
	}
	o.KV.OnBackendCommit = func(d time.Duration) {
		m.backendCommit.Observe(d.Seconds())
		if commit != nil {
			commit(d)
		}
	}
}

// Registry returns the registry /metrics serves, to add collectors to or
// to gather from.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in Prometheus' exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// attach registers the metrics that need the server: gRPC's and the
// store's. It panics if m belongs to another server already.
func (m *Metrics) attach(s *Server, extensive bool) {
	if !m.attached.CompareAndSwap(false, true) {
		panic("server: Options.Metrics belongs to another Server already; make one with NewMetrics per Server")
	}
	var opts []grpcprom.ServerMetricsOption
	if extensive {
		opts = append(opts, grpcprom.WithServerHandlingTimeHistogram())
	}
	m.grpc = grpcprom.NewServerMetrics(opts...)
	m.reg.MustRegister(m.grpc, &serverCollector{s: s})
}

// grpcOptions are the server options that feed the metrics: interceptors
// and a codec that counts bytes.
func (m *Metrics) grpcOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(m.grpc.UnaryServerInterceptor(), m.unaryInterceptor),
		grpc.ChainStreamInterceptor(m.grpc.StreamServerInterceptor(), m.streamInterceptor),
		grpc.ForceServerCodecV2(countingCodec{m: m, base: encoding.GetCodecV2(grpcproto.Name)}),
	}
}

// unaryInterceptor counts etcd_server_client_requests_total (the
// client's API version, from the metadata clientv3 sends, as etcd's
// v3rpc/interceptor.go) and observes etcd_server_request_duration_seconds.
func (m *Metrics) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	m.countRequest(ctx, false)
	typ := requestType(info.FullMethod, req)
	if typ < 0 {
		return handler(ctx, req)
	}
	start := time.Now()
	resp, err := handler(ctx, req)
	m.observeDuration(typ, err == nil, time.Since(start).Seconds())
	return resp, err
}

func (m *Metrics) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	m.countRequest(ss.Context(), true)
	return handler(srv, ss)
}

// clientAPIVersion is the client API version clientv3 sends in its
// metadata, without copying the metadata.
func clientAPIVersion(ctx context.Context) string {
	if vs := metadata.ValueFromIncomingContext(ctx, rpctypes.MetadataClientAPIVersionKey); len(vs) > 0 {
		return vs[0]
	}
	return "unknown"
}

// requestType is etcd's type label of etcd_server_request_duration_seconds
// (etcdserver/v3_server.go getRequestType, Range, Txn), as an index into
// requestTypes, or -1 for requests etcd does not time.
func requestType(method string, req any) int {
	switch method[strings.LastIndexByte(method, '/')+1:] {
	case "Range":
		return 0
	case "Put":
		return 1
	case "DeleteRange":
		return 2
	case "Txn":
		if r, ok := req.(*pb.TxnRequest); ok && isTxnReadonly(r) {
			return 3
		}
		return 4
	case "Compact":
		return 5
	case "Alarm":
		return 6
	}
	return -1
}

// countingCodec is gRPC's proto codec, counting the bytes of the messages
// as etcd's codec does (v3rpc/codec.go: the marshalled message, before
// compression). A codec rather than a stats handler, with which gRPC
// would allocate a record for every event of every RPC.
type countingCodec struct {
	m    *Metrics
	base encoding.CodecV2
}

func (c countingCodec) Marshal(v any) (mem.BufferSlice, error) {
	out, err := c.base.Marshal(v)
	c.m.sentBytes.Add(float64(out.Len()))
	return out, err
}

func (c countingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.m.receivedBytes.Add(float64(data.Len()))
	return c.base.Unmarshal(data, v)
}

func (c countingCodec) Name() string { return c.base.Name() }

// serverCollector reports what the store, the watch hub and the alarms
// know at the time of a scrape.
type serverCollector struct{ s *Server }

var (
	descHasLeader = prometheus.NewDesc("etcd_server_has_leader",
		"Whether or not a leader exists. 1 is existence, 0 is not.", nil, nil)
	descIsLeader = prometheus.NewDesc("etcd_server_is_leader",
		"Whether or not this member is a leader. 1 if is, 0 otherwise.", nil, nil)
	descServerID = prometheus.NewDesc("etcd_server_id",
		"Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID.", []string{"server_id"}, nil)
	descVersion = prometheus.NewDesc("etcd_server_version",
		"Which version is running. 1 for 'server_version' label with current version.", []string{"server_version"}, nil)
	descGoVersion = prometheus.NewDesc("etcd_server_go_version",
		"Which Go version server is running with. 1 for 'server_go_version' label with current version.", []string{"server_go_version"}, nil)
	descAlarms = prometheus.NewDesc("etcd_debugging_server_alarms",
		"Alarms for every member in cluster. 1 for 'server_id' label with current ID. 2 for 'alarm_type' label with type of this alarm",
		[]string{"server_id", "alarm_type"}, nil)
	descDBSize = prometheus.NewDesc("etcd_mvcc_db_total_size_in_bytes",
		"Total size of the underlying database physically allocated in bytes.", nil, nil)
	descDBSizeInUse = prometheus.NewDesc("etcd_mvcc_db_total_size_in_use_in_bytes",
		"Total size of the underlying database logically in use in bytes.", nil, nil)
	descCurrentRev = prometheus.NewDesc("etcd_debugging_mvcc_current_revision",
		"The current revision of store.", nil, nil)
	descCompactRev = prometheus.NewDesc("etcd_debugging_mvcc_compact_revision",
		"The revision of the last compaction in store.", nil, nil)
	descWatchStreams = prometheus.NewDesc("etcd_debugging_mvcc_watch_stream_total",
		"Total number of watch streams.", nil, nil)
	descWatchers = prometheus.NewDesc("etcd_debugging_mvcc_watcher_total",
		"Total number of watchers.", nil, nil)
	descSlowWatchers = prometheus.NewDesc("etcd_debugging_mvcc_slow_watcher_total",
		"Total number of unsynced slow watchers.", nil, nil)
	descLogSize = prometheus.NewDesc("watchspec_mvcc_log_size_in_bytes",
		"Total size of the store's write-ahead log segments in bytes.", nil, nil)
	descMemRecords = prometheus.NewDesc("watchspec_mvcc_memory_records_in_bytes",
		"Bytes of the records kept in memory until a checkpoint writes them into the data file.", nil, nil)
	descMemWaits = prometheus.NewDesc("watchspec_mvcc_memory_waits_total",
		"Total number of times the writers waited for a checkpoint because the records kept in memory reached twice the checkpoint size.", nil, nil)
	descGroupCommits = prometheus.NewDesc("watchspec_mvcc_group_commits_total",
		"Total number of group commits appended to the write-ahead log (one fdatasync each).", nil, nil)
	descCheckpoints = prometheus.NewDesc("watchspec_mvcc_checkpoints_total",
		"Total number of checkpoints of the write-ahead log into the data file.", nil, nil)
)

func (c *serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHasLeader, descIsLeader, descServerID, descVersion, descGoVersion,
		descAlarms, descDBSize, descDBSizeInUse, descCurrentRev, descCompactRev, descWatchStreams, descWatchers,
		descSlowWatchers, descLogSize, descMemRecords, descMemWaits, descGroupCommits, descCheckpoints} {
		ch <- d
	}
}

func (c *serverCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(descHasLeader, 1)
	gauge(descIsLeader, 1)
	gauge(descServerID, 1, memberHex(s.opts.MemberID))
	gauge(descVersion, 1, s.opts.Version)
	gauge(descGoVersion, 1, runtime.Version())
	// This member's NOSPACE and CORRUPT always, 0 when not raised (etcd
	// has a series only once an alarm was raised, and keeps it at 0 after),
	// so that an alert can compare them with 1; other alarms while raised.
	self := memberHex(s.opts.MemberID)
	raised := map[alarmKey]bool{}
	for _, a := range s.Alarms() {
		raised[alarmKey{a.MemberID, a.Alarm}] = true
	}
	for _, typ := range []pb.AlarmType{pb.AlarmType_NOSPACE, pb.AlarmType_CORRUPT} {
		k := alarmKey{s.opts.MemberID, typ}
		v := 0.0
		if raised[k] {
			v = 1
		}
		delete(raised, k)
		gauge(descAlarms, v, self, typ.String())
	}
	for k := range raised {
		gauge(descAlarms, 1, memberHex(k.member), k.typ.String())
	}
	st := s.st.Stats()
	gauge(descDBSize, float64(st.DBSize))
	gauge(descDBSizeInUse, float64(st.DBSizeInUse))
	gauge(descCurrentRev, float64(st.Revision))
	gauge(descCompactRev, float64(max(0, st.CompactRevision)))
	gauge(descLogSize, float64(st.LogBytes))
	gauge(descMemRecords, float64(st.MemBytes))
	counter(descMemWaits, float64(st.MemWaits))
	counter(descGroupCommits, float64(st.GroupCommits))
	counter(descCheckpoints, float64(st.Checkpoints))
	hs := s.st.Hub().Stats()
	gauge(descWatchStreams, float64(hs.Streams))
	gauge(descWatchers, float64(hs.Synced+hs.Unsynced+hs.Victims))
	gauge(descSlowWatchers, float64(hs.Unsynced+hs.Victims))
}
