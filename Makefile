# watchspec — the README's commands and the checks CI runs.
GO ?= go
PKGS ?= ./...
# The modules: the root (what third parties import), tests (the
# harnesses that drive kine, the apiserver cacher and embedded etcd, and the
# bench) and examples/conformance (the conformance helpers called as a third
# party would). test, vet, bench and cover run PKGS in each, from its directory.
MODULES := . tests examples/conformance
FUZZTIME ?= 10s

.PHONY: all test vet fmt fuzz bench bench-compare cover ci crash corrupt slow mutate conform-long conform-kube adversary adversary-seeds adversary-informers

all: vet test

# The test suite: what CI runs (through .ci/run) and the README tells you to run.
test:
	@set -e; for m in $(MODULES); do echo "== $$m"; (cd $$m && $(GO) test -race -count=1 $(PKGS)); done

vet:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) vet $(PKGS)); done

# fmt fails when a file is not gofmt-formatted.
fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# A short run of every fuzz target (FUZZTIME each).
fuzz:
	$(GO) test ./model/watch -run '^$$' -fuzz '^FuzzValidator$$' -fuzztime $(FUZZTIME)
	$(GO) test ./traces -run '^$$' -fuzz '^FuzzRead$$' -fuzztime $(FUZZTIME)
	$(GO) test ./impl/server -run '^$$' -fuzz '^FuzzServer$$' -fuzztime $(FUZZTIME)

# Benchmarks; compare two runs with benchstat.
bench:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) test -run '^$$' -bench . -benchmem $(PKGS)); done

# The reference server side by side with an embedded etcd (6-10 minutes on
# 2 cores): prints the table and writes docs/PERFORMANCE.md and
# docs/performance.svg. BENCHFLAGS adds flags, e.g. BENCHFLAGS=--quick.
BENCHFLAGS ?=
bench-compare:
	$(GO) run ./cmd/watchspec bench --vs-etcd $(BENCHFLAGS)

# The crash test at full strength: CRASH_TRIALS SIGKILLs of the store under
# concurrent writers and compactions (go test runs 20).
CRASH_TRIALS ?= 200
crash:
	CRASH_TRIALS=$(CRASH_TRIALS) $(GO) test ./impl/mvcc -run '^TestCrash$$' -count=1 -v -timeout 30m

# The corruption suite at full strength: CORRUPT_SEEDS stores, each damaged in
# every way the suite knows (go test runs 4).
CORRUPT_SEEDS ?= 200
corrupt:
	CORRUPT_SEEDS=$(CORRUPT_SEEDS) $(GO) test ./impl/mvcc -run '^TestCorruption$$' -count=1 -v -timeout 60m

# The slow-consumer test at full size (10,000 watchers, 100,000 events), without
# the race detector (go test -race runs it scaled down).
slow:
	$(GO) test ./proptest -run '^TestSlowConsumers$$' -count=1 -v -timeout 30m -slow.full

# The long draw of the mutation campaign against the checker (issue 19):
# MUTANTS mutants of every operator over the whole corpus, seeded with SEED
# (default: the time; the table prints it, and -mutate.seed=SEED replays
# it). Prints the table of caught / other name / missed / false positives
# per operator; fails on any failure not explained by a known defect
# (internal/mutate/known_test.go, empty today). go test runs a short draw (5
# per operator) without the corpus files over 512 KiB; make mutate draws
# from the whole corpus (-mutate.maxsize=0).
MUTANTS ?= 50
SEED ?= $(shell date +%s)
mutate:
	$(GO) test ./internal/mutate -run '^TestCampaign$$' -count=1 -v -timeout 60m -mutate.n=$(MUTANTS) -mutate.seed=$(SEED) -mutate.maxsize=0

# The legal adversary (issue 14, docs/ADVERSARY.md): ADVERSARY_DURATION of
# the conformance workload under the adversary with seed SEED; the trace
# must pass the check, and the table of choices made must show every kind
# (go test runs none of this; it runs 20 seeds of 700 ms).
ADVERSARY_DURATION ?= 60s
adversary:
	mkdir -p $(ARTIFACTS)
	$(GO) test ./adversary -run '^TestEveryKindExercised$$' -count=1 -v -timeout 30m -adversary.duration=$(ADVERSARY_DURATION) -adversary.first=$(SEED) -artifacts -outputdir $(ARTIFACTS)

# ADVERSARY_SEEDS seeds of the conformance workload under the adversary,
# each trace checked (issue 14's acceptance: 1,000). The trace of a seed
# that fails is kept under ARTIFACTS (go test -artifacts), with the
# adversary's choices in the log (-v).
ADVERSARY_SEEDS ?= 1000
ARTIFACTS ?= /tmp/watchspec-artifacts
adversary-seeds:
	mkdir -p $(ARTIFACTS)
	ADVERSARY_SEEDS=$(ADVERSARY_SEEDS) $(GO) test ./adversary -run '^TestConformUnderAdversary$$' -count=1 -v -timeout 3h -artifacts -outputdir $(ARTIFACTS)

# ADVERSARY_SEEDS seeds of the informer adversary (adversary/listwatch),
# with watchspec's informer and client-go's, in process and client-go's over
# HTTP (the handler): every run passes §4 and §5
# (go test runs 20 seeds per informer).
adversary-informers:
	$(GO) test ./adversary/listwatch -run '^TestLegal(UnderAdversary|OverHTTP)$$' -count=1 -v -timeout 1h -listwatch.seeds=$(ADVERSARY_SEEDS)

# The acceptance runs of issue 11 against real etcd 3.7.3 (docs/CONFORMANCE.md),
# without the race detector: CONFORM_RUNS consecutive conform runs of
# CONFORM_DURATION with the workload's defaults against 1 member and against
# 3 members killed and restarted; 5 runs each of a store compacted before each
# run and reused, through conform.Record and through `conform --endpoints`
# (against etcd and `watchspec serve`). The trace of a failing run is kept
# under CONFORM_OUT/_artifacts.
CONFORM_RUNS ?= 10
CONFORM_DURATION ?= 10s
CONFORM_OUT ?= $(or $(TMPDIR),/tmp)/watchspec-conform-long
conform-long:
	mkdir -p $(CONFORM_OUT)
	$(GO) test ./conform -run '^(TestEtcdOneMember|TestEtcdThreeMembersWithKills)$$' -count=1 -v -timeout 60m -artifacts -outputdir $(CONFORM_OUT) -conform.runs $(CONFORM_RUNS) -conform.duration $(CONFORM_DURATION)
	$(GO) test ./conform -run 'ReusedCompactedStore' -count=1 -v -timeout 30m -artifacts -outputdir $(CONFORM_OUT) -conform.reused-runs 5
	$(GO) test ./cmd/watchspec -run '^TestConformEndpointsReused$$' -count=1 -v -timeout 30m -artifacts -outputdir $(CONFORM_OUT) -conform.endpoint-runs 5

# The Kubernetes workload over HTTP (conform/kube) against the real
# apiserver of tests/apiservertest, over etcd and over the reference
# server, for KUBE_DURATION each (go test runs 3 s).
KUBE_DURATION ?= 60s
conform-kube:
	$(GO) test ./tests/apiservertest -run '^TestConform$$' -count=1 -v -timeout 30m -apiserver.duration=$(KUBE_DURATION)

cover:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) test -count=1 -coverprofile=cover.out $(PKGS) && $(GO) tool cover -func=cover.out | tail -n 1); done

ci:
	bash .ci/run
