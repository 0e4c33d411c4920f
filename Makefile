# watchspec — the README's commands and the checks CI runs.
GO ?= go
PKGS ?= ./...
FUZZTIME ?= 10s

.PHONY: all test vet fmt fuzz bench cover ci

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

# Benchmarks; compare two runs with benchstat.
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

cover:
	$(GO) test -count=1 -coverprofile=cover.out $(PKGS)
	$(GO) tool cover -func=cover.out | tail -n 1

ci:
	bash .ci/run
