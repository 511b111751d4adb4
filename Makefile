# wsgate: build, test, fuzz, bench.
#
#   make test    installs what the tests need (redis-server, nats-server, Chromium,
#                protoc, Node.js, test/pusher's npm packages), then runs gofmt, vet,
#                staticcheck, every test with the race detector, the JavaScript
#                package's tests, and the contract suite
#   make build   bin/wsgate
#   make generate  the Go code of the protobuf API (proto/wsgate/v1)
#   make fuzz    runs every fuzz target for FUZZTIME (default 30s)
#   make bench   the Go benchmarks of the hot paths

SHELL    := /bin/bash
GO       ?= go
FUZZTIME ?= 30s
SHARED   ?= ../shared

.PHONY: all build generate test test-go test-js pusher-deps conformance deps vet fuzz bench clean

all: build

build:
	$(GO) build -o bin/wsgate ./cmd/wsgate

# The generated code is committed; proto/wsgate/v1's tests check it is current.
generate:
	@scripts/generate.sh

# Test dependencies come from Debian's packages; nothing is started here:
# each test starts its own redis-server on a free port and stops it.
deps:
	@scripts/install-test-deps.sh

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	cd deploy/helmtest && $(GO) vet ./...

# Every part runs, also after one failed, and the run fails at the end
# naming the parts that did.
test: deps
	@failed=; for part in vet test-go test-js conformance; do \
		$(MAKE) --no-print-directory $$part || failed="$$failed $$part"; \
	done; \
	if [ -n "$$failed" ]; then scripts/fail-summary.sh $(TESTLOG); echo "make test: FAILED:$$failed"; exit 1; fi; \
	echo "make test: vet, test-go, test-js and conformance passed"

# deploy/helmtest (the Helm chart rendered by Helm's packages) is a module of
# its own, keeping Helm out of the gateway's dependencies. Its tests render
# templates in one goroutine, so they run without the race detector: built
# with it, Helm's Kubernetes dependencies alone take minutes to compile.
# The output is also kept in TESTLOG: a failed `make test` ends with the
# failed tests' own lines (scripts/fail-summary.sh), which the tail of a
# long CI log would otherwise cut.
TESTLOG ?= $(or $(TMPDIR),/tmp)/wsgate-test-go.log

# test/pusher's Go tests drive the real Pusher clients (pusher-js, Laravel
# Echo, the pusher server library) from Node and Chromium: npm ci installs
# the versions its package-lock.json pins.
test-go: pusher-deps
	@rc=0; set -o pipefail; $(GO) test -race -count=1 -timeout 20m ./... 2>&1 | tee $(TESTLOG) || rc=1; \
	(cd deploy/helmtest && $(GO) test -count=1 ./...) || rc=1; exit $$rc

pusher-deps:
	cd test/pusher && npm ci --no-audit --no-fund --loglevel=error

# The npm package @wsgate/client (web/client): its unit tests and an
# integration test against bin/wsgate under Node's test runner, the package
# as `npm pack` makes it compiled in a fresh TypeScript project, publint,
# @arethetypeswrong/cli and `npm publish --dry-run` on the package, and
# `tsc --noEmit` on the typed example. npm ci installs the locked devDependencies.
test-js: build
	cd web/client && npm ci --no-audit --no-fund --loglevel=error && WSGATE_BIN=$(CURDIR)/bin/wsgate npm test && npm run typecheck

# The public contract suite, when the shared folder is beside the project;
# under CI (CI=true) a missing suite fails the run.
conformance: build
	@if [ -x $(SHARED)/conformance/run ]; then \
		$(SHARED)/conformance/run; \
	elif [ "$${CI:-}" = true ]; then \
		echo "contract suite not found at $(SHARED)/conformance (CI=true: it must run)"; exit 1; \
	else \
		echo "contract suite not found at $(SHARED)/conformance: skipped (outside CI)"; \
	fi

# Every fuzz target of the tree (found by name, so a new one is never left
# out), each for FUZZTIME; the seed corpora live in each package's testdata/fuzz.
fuzz:
	@set -e; grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r f; do \
		dir=$$(dirname "$$f"); \
		for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$$f"); do \
			echo "fuzz $$target ($$dir)"; \
			$(GO) test -run XXX -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) "$$dir"; \
		done; \
	done

bench:
	$(GO) test -run XXX -bench . -benchmem ./protocol/ ./internal/wsframe/ ./internal/auth/ ./internal/gateway/ ./internal/cluster/

clean:
	rm -rf bin
