# compilefarm: `make run` starts the embedded farm on 127.0.0.1:8140;
# `make test` runs the whole suite (installing what it needs first).
GO      ?= go
DATA    ?= .data/dev
LISTEN  ?= 127.0.0.1:8140
METRICS ?= 127.0.0.1:9140
ENVS    ?= examples/environments

.PHONY: run build deps puppetdb-deps puppetdb puppetdb-stop puppetdb-reference emulators pcp-clients fuzz test unit e2e vet fmt-check bench clean synth infra-test scaler-bootstrap \
	localstack-up localstack-deploy localstack-e2e localstack-down cdk-gc

build:
	$(GO) build -o bin/broker ./broker

deps:
	scripts/install-deps.sh

# A real PuppetDB 7 and PostgreSQL 15 from Debian (scripts/puppetdb.sh),
# for the tests of the PuppetDB sink and puppetdb_query.
puppetdb-deps:
	scripts/puppetdb.sh install

# A PuppetDB for development, in PUPPETDB_DIR (plain http and https on free
# loopback ports; DIR/env says which): run the tests that need it with the
# export line this prints. make puppetdb-stop stops it.
PUPPETDB_DIR ?= .data/puppetdb
puppetdb: puppetdb-deps
	GO=$(GO) scripts/puppetdb.sh start $(PUPPETDB_DIR)
	@cat $(PUPPETDB_DIR)/env
	@echo "export COMPILEFARM_PUPPETDB_DIR=$(abspath $(PUPPETDB_DIR))"
puppetdb-stop:
	scripts/puppetdb.sh stop $(PUPPETDB_DIR)

# Issue 22's side-by-side test with a real Puppet Server 7 (Debian's
# puppetserver, a second JVM: too slow for make test's budget): the same
# agent runs through Puppet Server with the puppetdb termini and through
# the farm, compared in PuppetDB; it re-records Puppet Server's side in
# test/puppetdbref/testdata/puppetserver.json, which make test compares
# the farm with. Uses COMPILEFARM_PUPPETDB_DIR's PuppetDB, or its own.
puppetdb-reference: puppetdb-deps
	scripts/puppetserver.sh install
	GO=$(GO) scripts/puppetdb-reference.sh

# Local emulators of AWS APIs for the AWS drivers' tests, installed into
# .tools (cached: later runs take no time).
EMULATORS = scripts/emulators/s3.sh scripts/emulators/sqs.sh scripts/emulators/dynamodb.sh scripts/emulators/secretsmanager.sh scripts/emulators/kms.sh
emulators:
	@for s in $(EMULATORS); do $$s || exit 1; done

# The real PCP clients (pxp-agent, ruby-pcp-client) the PCP broker is tested
# against, built once into .tools/pcp-client.
pcp-clients:
	scripts/pcp-clients.sh

run: deps build
	bin/broker dev --listen $(LISTEN) --metrics-listen $(METRICS) --environments $(ENVS) --data $(DATA)

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# The whole suite: unit tests, contract suites, and the end-to-end tests in
# test/ that drive a real puppet agent against a real broker; then the fuzz
# targets, the CDK app's tests and a synth (infra/; these need node, and fail
# without it). scripts/test.sh runs them, beside a real PuppetDB it starts
# and stops, and ends with the ten slowest packages; TEST_P test binaries
# run at a time (default 6).
test: deps puppetdb-deps emulators pcp-clients fmt-check vet
	GO=$(GO) scripts/test.sh

# A bounded run of each fuzz target (the seed corpus in testdata runs in
# every `go test`): the PCP decoders face bytes from any client, the
# encoded-facts decoder every agent's catalog request. FUZZMINIMIZE bounds
# the minimizing of each new interesting input (Go's default, 60s, spent a
# whole 15 s run minimizing one large facts input: 30 executions instead of
# 100,000).
FUZZTIME ?= 15s
FUZZMINIMIZE ?= 2s
FUZZ = $(GO) test -run '^$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE)
fuzz:
	$(FUZZ) -fuzz '^FuzzDecodeV1$$' ./pkg/pcp/message
	$(FUZZ) -fuzz '^FuzzDecodeV2$$' ./pkg/pcp/message
	$(FUZZ) -fuzz '^FuzzDecodeOnlyEncoded$$' ./pkg/facts

# The AWS CDK app (infra/, its own Go module): its tests synthesize the stack
# with the jsii runtime (node 20+ on PATH; no cdk CLI, Docker or AWS needed).
# -count=1: the test cache cannot see asset files node reads.
INFRA_ENV = GOWORK=off JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20
infra-test:
	@command -v node >/dev/null 2>&1 || { echo "infra-test: node (20+) is required: the CDK runs in node through jsii" >&2; exit 1; }
	cd infra && $(INFRA_ENV) $(GO) vet ./...
	cd infra && $(INFRA_ENV) $(GO) test -count=1 -timeout 15m ./...

# The scaler Lambda's bootstrap, for the CDK app's zip asset.
SCALER_BOOTSTRAP = infra/assets/scaler/bootstrap
# A failed build stops here (and removes the old bootstrap first, so no
# stale or placeholder asset is synthesized).
scaler-bootstrap:
	@mkdir -p $(dir $(SCALER_BOOTSTRAP))
	rm -f $(SCALER_BOOTSTRAP)
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -ldflags="-s -w" -tags lambda.norpc -o $(SCALER_BOOTSTRAP) ./functions/scaler

# Synthesizes the stack into a fresh infra/cdk.out (each synth would leave
# another copy of the source tree's image assets there) with the pinned CDK CLI
# (scripts/cdk.sh installs it into .tools/cdk), offline: no notices, no
# telemetry. CDK_CONTEXT passes context, e.g. CDK_CONTEXT="-c stage=prod".
# First the Go build stage of both images' Dockerfiles runs here for
# linux/arm64 into a throwaway directory (scripts/cross-compile.sh), so a
# change the images cannot build fails synth, not a cdk deploy.
CDK_CONTEXT ?=
synth: scaler-bootstrap
	GO=$(GO) scripts/cross-compile.sh
	scripts/cdk.sh
	rm -rf infra/cdk.out
	cd infra && $(INFRA_ENV) CDK_DISABLE_CLI_TELEMETRY=true CDK_DISABLE_VERSION_CHECK=1 CDK_HOME=$(CURDIR)/.tools/cdk-home \
	  ../.tools/cdk/node_modules/.bin/cdk synth --no-notices --quiet $(CDK_CONTEXT)

# Removes the CDK's image assets that no stack uses any more from the
# bootstrap's shared ECR repository (docs/operations.md, Retention), with the
# pinned CLI's reference-aware `cdk gc`: an image any CloudFormation template
# in the account and region refers to is kept; an unused one is tagged, and
# deleted once it has been unused GC_ROLLBACK_DAYS (30) days and is at least a
# day old. Needs AWS credentials that may read every stack's template and
# tag and delete images. GC_ENV=aws://ACCOUNT/REGION is required; GC_ACTION=print
# only counts; GC_TYPE=all includes the bootstrap bucket's file assets;
# GC_TOOLKIT_STACK names a bootstrap made with its own qualifier.
GC_ENV ?=
GC_ROLLBACK_DAYS ?= 30
GC_ACTION ?= full
GC_TYPE ?= ecr
GC_TOOLKIT_STACK ?= CDKToolkit
cdk-gc:
	@case "$(GC_ENV)" in aws://*/*) ;; *) echo "cdk-gc: set GC_ENV=aws://ACCOUNT/REGION (the environment whose bootstrap to collect)" >&2; exit 1;; esac
	scripts/cdk.sh gc $(GC_ENV) --unstable=gc --type=$(GC_TYPE) --action=$(GC_ACTION) \
	  --rollback-buffer-days=$(GC_ROLLBACK_DAYS) --created-buffer-days=1 --confirm=false --toolkit-stack-name=$(GC_TOOLKIT_STACK)

# The stack on LocalStack and a real puppet agent against it (localstack/README.md):
# Docker, Node.js and, for pro, LOCALSTACK_AUTH_TOKEN. CI does not run these
# (no Docker engine there). What keeps them correct without one:
# infra/farmstack/localstack_test.go synthesizes the stack with the exact
# context `run.sh deploy` uses per tier and fails on everything its check
# would stop a deploy on; localstack/cfnsupport's tests cover that check;
# localstack/runsh_test.go runs `run.sh e2e` against the loopback emulators.
localstack-up: ; localstack/run.sh up
localstack-deploy: ; localstack/run.sh deploy
localstack-e2e: ; localstack/run.sh e2e
localstack-down: ; localstack/run.sh down

# The fast lane: every package's tests with -short, in seconds, with no
# emulator, Ruby/Puppet, puppet agent, openssl binary or network. Tests that
# need one of those skip ("skipped with -short"); `make test` runs them all.
# Results are cached: a package whose code and test inputs did not change is
# not run again (go clean -testcache forgets them).
unit:
	$(GO) test -short ./...

e2e: deps emulators pcp-clients
	$(GO) test -count=1 -timeout 20m -p 6 -v ./test/...

bench: deps puppetdb-deps emulators build
	bench/run.sh

clean:
	rm -rf bin .data infra/cdk.out $(SCALER_BOOTSTRAP)
