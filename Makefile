# watchspec — the README's commands and the checks CI runs.
GO ?= go
PKGS ?= ./...
FUZZTIME ?= 10s

.PHONY: all test vet fmt fuzz bench bench-compare cover ci crash slow mutate

all: vet test

# The test suite: what CI runs (through .ci/run) and the README tells you to run.
test:
	$(GO) test -race -count=1 $(PKGS)

vet:
	$(GO) vet $(PKGS)

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
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

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

cover:
	$(GO) test -count=1 -coverprofile=cover.out $(PKGS)
	$(GO) tool cover -func=cover.out | tail -n 1

ci:
	bash .ci/run
