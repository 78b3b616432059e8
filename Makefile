# compilefarm: `make run` starts the embedded farm on 127.0.0.1:8140;
# `make test` runs the whole suite (installing what it needs first).
GO      ?= go
DATA    ?= .data/dev
LISTEN  ?= 127.0.0.1:8140
METRICS ?= 127.0.0.1:9140
ENVS    ?= examples/environments

.PHONY: run build deps emulators test unit e2e vet fmt-check bench clean

build:
	$(GO) build -o bin/broker ./broker

deps:
	scripts/install-deps.sh

# Local emulators of AWS APIs for the AWS drivers' tests, installed into
# .tools (cached: later runs take no time).
EMULATORS = scripts/emulators/s3.sh scripts/emulators/sqs.sh scripts/emulators/dynamodb.sh scripts/emulators/secretsmanager.sh
emulators:
	@for s in $(EMULATORS); do $$s || exit 1; done

run: deps build
	bin/broker dev --listen $(LISTEN) --metrics-listen $(METRICS) --environments $(ENVS) --data $(DATA)

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# The whole suite: unit tests, contract suites, and the end-to-end tests in
# test/ that drive a real puppet agent against a real broker.
test: deps emulators fmt-check vet
	$(GO) test -count=1 -timeout 20m ./...

# The fast lane: every package's tests with -short, in seconds, with no
# emulator, Ruby/Puppet, puppet agent, openssl binary or network. Tests that
# need one of those skip ("skipped with -short"); `make test` runs them all.
# Results are cached: a package whose code and test inputs did not change is
# not run again (go clean -testcache forgets them).
unit:
	$(GO) test -short ./...

e2e: deps
	$(GO) test -count=1 -timeout 20m -v ./test/...

bench: deps build
	scripts/bench.sh

clean:
	rm -rf bin .data
