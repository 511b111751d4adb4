# wsgate: build, test, fuzz, bench.
#
#   make test    installs what the tests need (redis-server, Chromium), then runs
#                vet, every test with the race detector, and the contract suite
#   make build   bin/wsgate
#   make fuzz    runs each fuzz target for FUZZTIME (default 30s)
#   make bench   the Go benchmarks of the hot paths

GO       ?= go
FUZZTIME ?= 30s
SHARED   ?= ../shared

.PHONY: all build test test-go conformance deps vet fuzz bench clean

all: build

build:
	$(GO) build -o bin/wsgate ./cmd/wsgate

# Test dependencies come from Debian's packages; nothing is started here:
# each test starts its own redis-server on a free port and stops it.
deps:
	@scripts/install-test-deps.sh

vet:
	$(GO) vet ./...

test: deps vet test-go conformance

test-go:
	$(GO) test -race -count=1 -timeout 20m ./...

# The public contract suite, when the shared folder is beside the project.
conformance: build
	@if [ -x $(SHARED)/conformance/run ]; then \
		$(SHARED)/conformance/run; \
	else \
		echo "contract suite not found at $(SHARED)/conformance: skipped"; \
	fi

fuzz:
	$(GO) test -run XXX -fuzz FuzzParseHeader -fuzztime $(FUZZTIME) ./internal/wsframe/
	$(GO) test -run XXX -fuzz FuzzDecodeClient -fuzztime $(FUZZTIME) ./protocol/
	$(GO) test -run XXX -fuzz FuzzVerify -fuzztime $(FUZZTIME) ./internal/auth/

bench:
	$(GO) test -run XXX -bench . -benchmem ./protocol/ ./internal/wsframe/ ./internal/auth/ ./internal/gateway/ ./internal/cluster/

clean:
	rm -rf bin
