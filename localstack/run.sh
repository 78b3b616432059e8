#!/usr/bin/env bash
# localstack/run.sh: the compile farm's CDK stack on LocalStack, and a real
# puppet agent run against it. See localstack/README.md.
#
#   localstack/run.sh up       start LocalStack (docker compose) and wait until it is healthy
#   localstack/run.sh deploy   cdklocal bootstrap + deploy of the stack compilefarm-local
#   localstack/run.sh e2e      CA, front door, code deploy, `puppet agent -t`, `broker nodes`
#   localstack/run.sh down     stop LocalStack and forget its state
#   localstack/run.sh status   LocalStack's health and the tier in use
#   localstack/run.sh context  the -c context deploy synthesizes with (infra's tests read it)
#
# The tier decides what is deployed (LOCALSTACK_TIER, default: pro when
# LOCALSTACK_AUTH_TOKEN is set, else free):
#   free  the stack with -c fleet=false -c compileFunction=false; the front
#         door and the compile function's bootstrap run on this host
#   pro   the whole stack (fleet on ECS behind the NLB, the compile function
#         from its container image through ECR), needs a licensed auth token;
#         with -c availabilityZones=<region>a,<region>b (LocalStack's
#         CloudFormation has no Fn::GetAZs) and -c awsEndpointURL= LocalStack's
#         address on its Docker network, for the fleet's tasks
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
compose_file="$here/docker-compose.yml"
project=compilefarm-localstack
stage=local
stack="compilefarm-$stage"
outputs=${LOCALSTACK_OUTPUTS:-$here/.outputs.json}
assembly="$here/.cdk.out"
build="$here/.build"
cdk_bin="$root/.tools/cdk/node_modules/.bin"

endpoint=${LOCALSTACK_ENDPOINT:-http://localhost.localstack.cloud:4566}
region=${AWS_REGION:-${AWS_DEFAULT_REGION:-us-east-1}}
# LocalStack as the containers it starts (ECS tasks, Lambdas) reach it: its
# container name on the compose network (docker-compose.yml: container_name,
# networks, MAIN_DOCKER_NETWORK and LAMBDA_DOCKER_NETWORK).
network_endpoint=http://compilefarm-localstack:4566
health_url=${LOCALSTACK_HEALTH_URL:-http://127.0.0.1:4566/_localstack/health}
health_timeout=${LOCALSTACK_HEALTH_TIMEOUT:-240}

# The community image's last release without an account requirement; later
# releases (2026.03.0 on) start only with LOCALSTACK_AUTH_TOKEN. Override
# with LOCALSTACK_IMAGE.
community_image=localstack/localstack:4.14.0
pro_image=localstack/localstack-pro:latest

say() { printf '==> %s\n' "$*"; }
die() {
	printf 'localstack/run.sh: %s\n' "$*" >&2
	exit 1
}

tier_of_env() {
	local t=${LOCALSTACK_TIER:-}
	if [[ -z $t ]]; then
		if [[ -n ${LOCALSTACK_AUTH_TOKEN:-} ]]; then t=pro; else t=free; fi
	fi
	case $t in
	free | community) echo free ;;
	pro | base | ultimate) echo pro ;;
	*)
		echo "localstack/run.sh: LOCALSTACK_TIER=$t: want free or pro" >&2
		return 1
		;;
	esac
}
tier_name=$(tier_of_env) || exit 1
tier() { echo "$tier_name"; }

image() {
	if [[ -n ${LOCALSTACK_IMAGE:-} ]]; then
		echo "$LOCALSTACK_IMAGE"
	elif [[ $(tier) == pro ]]; then
		echo "$pro_image"
	elif [[ -n ${LOCALSTACK_AUTH_TOKEN:-} ]]; then
		echo localstack/localstack:latest # the free tier of the current image needs an account too
	else
		echo "$community_image"
	fi
}

need() { # need CMD "what it is for / how to get it"
	command -v "$1" >/dev/null 2>&1 || die "$1 not found: $2"
}

need_docker() {
	need docker "install Docker Engine (https://docs.docker.com/engine/install/) with the compose plugin; LocalStack runs in a container and starts Lambda (and, with Pro, ECS) containers through the Docker socket"
	local err
	if ! err=$(docker info 2>&1 >/dev/null); then
		die "docker is installed but its daemon does not answer (start it, or check DOCKER_HOST and your permission on the socket):
$(printf '%s\n' "$err" | tail -n 3)"
	fi
	if docker compose version >/dev/null 2>&1; then
		compose=(docker compose)
	elif command -v docker-compose >/dev/null 2>&1; then
		compose=(docker-compose)
	else
		die "neither 'docker compose' (the compose plugin) nor docker-compose is installed: https://docs.docker.com/compose/install/"
	fi
	compose+=(-f "$compose_file" -p "$project")
}

need_token() {
	[[ $(tier) == free || -n ${LOCALSTACK_AUTH_TOKEN:-} ]] && return
	die "LOCALSTACK_TIER=pro needs LOCALSTACK_AUTH_TOKEN (a licensed token: ECS, ECR and ELBv2 are Base-tier services).
Get one at https://app.localstack.cloud/settings/auth-tokens (https://docs.localstack.cloud/aws/getting-started/auth-token/),
or run without it: LOCALSTACK_TIER=free localstack/run.sh $1"
}

aws_env() {
	export AWS_ENDPOINT_URL=$endpoint AWS_REGION=$region
	export AWS_DEFAULT_REGION=$region
	export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-test} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-test}
	unset AWS_PROFILE AWS_SESSION_TOKEN
}

healthy() { curl -fsS --max-time 3 "$health_url" 2>/dev/null; }

require_up() {
	healthy >/dev/null || die "LocalStack does not answer at $health_url: run 'make localstack-up' (localstack/run.sh up) first"
}

wait_healthy() {
	local start=$SECONDS body state
	printf '==> waiting for LocalStack at %s ' "$health_url"
	while ! body=$(healthy); do
		state=$("${compose[@]}" ps -a --format '{{.State}} {{.Status}}' localstack 2>/dev/null | head -n 1 || true)
		if [[ $state == exited* ]]; then
			echo
			"${compose[@]}" logs --tail 40 localstack >&2 || true
			if "${compose[@]}" logs localstack 2>/dev/null | grep -qi 'license activation failed\|requires an account'; then
				die "LocalStack stopped: it wants an account. Set LOCALSTACK_AUTH_TOKEN (https://docs.localstack.cloud/aws/getting-started/auth-token/), or leave LOCALSTACK_IMAGE unset and the token empty to use $community_image"
			fi
			die "the LocalStack container stopped ($state); its log is above"
		fi
		if ((SECONDS - start > health_timeout)); then
			echo
			"${compose[@]}" logs --tail 40 localstack >&2 || true
			die "LocalStack was not healthy after ${health_timeout}s (LOCALSTACK_HEALTH_TIMEOUT); its log is above"
		fi
		printf '.'
		sleep 2
	done
	printf ' up after %ds\n' $((SECONDS - start))
	local edition
	edition=$(printf '%s\n' "$body" | sed -n 's/.*"edition": *"\([a-z]*\)".*/\1/p')
	say "LocalStack edition: ${edition:-unknown}"
	if [[ $(tier) == pro && $edition != pro && $edition != enterprise ]]; then
		say "warning: LOCALSTACK_TIER=pro, but LocalStack says edition '${edition:-unknown}': ECS, ECR and ELBv2 need a licensed token (Base tier or above)"
	fi
}

cmd_up() {
	need_docker
	need_token up
	need curl "install curl (the health check)"
	local img
	img=$(image)
	export LOCALSTACK_IMAGE=$img LOCALSTACK_AUTH_TOKEN=${LOCALSTACK_AUTH_TOKEN:-}
	if [[ $(tier) == pro ]]; then
		if [[ $(uname -m) != aarch64 && $(uname -m) != arm64 ]]; then
			say "note: the fleet, the compile function and the scaler are arm64: Docker on this $(uname -m) host needs arm64 emulation (README: Architectures)"
		fi
	fi
	say "tier $(tier), image $img"
	"${compose[@]}" up -d
	wait_healthy
	say "LocalStack is up. Next: make localstack-deploy"
}

cmd_down() {
	need_docker
	"${compose[@]}" down -v --remove-orphans
	rm -rf "$outputs" "$assembly"
	say "LocalStack stopped; its state (and $outputs) is gone"
}

cmd_status() {
	say "tier $(tier), image $(image), endpoint $endpoint"
	healthy || die "LocalStack does not answer at $health_url"
	echo
	if [[ -f $outputs ]]; then say "deployed: $outputs"; else say "not deployed yet (no $outputs)"; fi
}

cdk_env() {
	aws_env
	export CDK_DISABLE_CLI_TELEMETRY=true CDK_DISABLE_VERSION_CHECK=1 CDK_HOME="$root/.tools/cdk-home"
	export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=${JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION:-20}
	need node "install Node.js (the CDK CLI and jsii run on it)"
	need go "install Go (the CDK app is in Go)"
	if [[ ! -x $cdk_bin/cdklocal ]]; then
		[[ -x $root/scripts/cdk.sh ]] || die "the CDK CLIs are not installed ($cdk_bin/cdklocal) and scripts/cdk.sh is missing:
  npm install --prefix .tools/cdk aws-cdk@2.1148.1 aws-cdk-local@3.0.4"
		say "installing the pinned CDK CLIs (scripts/cdk.sh)"
		"$root/scripts/cdk.sh"
		[[ -x $cdk_bin/cdklocal ]] || die "scripts/cdk.sh ran but $cdk_bin/cdklocal is still missing"
	fi
}

lsfarm() {
	mkdir -p "$build"
	(cd "$root" && go build -o "$build/lsfarm" ./localstack/lsfarm) || die "go build ./localstack/lsfarm failed"
	"$build/lsfarm" "$@"
}

# deploy_context: the CDK context deploy synthesizes with, one key=value a
# line. infra/farmstack/localstack_test.go checks the stack with exactly
# these (run.sh context), so its test fails whenever deploy's check would.
deploy_context() {
	local fleet compile_fn
	if [[ $(tier) == pro ]]; then
		fleet=true compile_fn=true
	else
		fleet=false compile_fn=false
	fi
	fleet=${LOCALSTACK_FLEET:-$fleet}
	printf '%s\n' "stage=$stage" "fleet=$fleet" "compileFunction=$compile_fn"
	if [[ $(tier) == pro ]]; then
		# LocalStack's CloudFormation does not support Fn::GetAZs: name the
		# VPC's zones. The fleet's tasks reach LocalStack by its name on the
		# Docker network they join (README: Troubleshooting).
		printf '%s\n' "availabilityZones=${region}a,${region}b" "awsEndpointURL=$network_endpoint"
	fi
	local kv
	for kv in ${LOCALSTACK_CDK_CONTEXT:-}; do printf '%s\n' "$kv"; done
}

cmd_context() { deploy_context; }

cmd_deploy() {
	require_up
	need_token deploy
	cdk_env
	local t
	t=$(tier)
	if [[ $t == pro ]]; then
		need_docker # cdklocal deploy builds the compile function's and the fleet's images and pushes them to LocalStack's ECR
	fi
	local ctx=() kv
	while IFS= read -r kv; do ctx+=(-c "$kv"); done < <(deploy_context)

	# The scaler is a zip asset: its arm64 bootstrap must exist before synth
	# (infra/.gitignore: built like this by the Makefile, a placeholder in tests).
	# It goes with the compile function: compileFunction=false (free) has none.
	if [[ $(deploy_context | sed -n 's/^compileFunction=//p' | tail -n 1) != false ]]; then
		say "building the scaler's bootstrap (linux/arm64) into infra/assets/scaler"
		(cd "$root" && GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -tags lambda.norpc -trimpath \
			-o infra/assets/scaler/bootstrap ./functions/scaler) || die "go build ./functions/scaler failed"
	fi

	say "synth $stack (${ctx[*]})"
	rm -rf "$assembly"
	(cd "$root/infra" && "$cdk_bin/cdklocal" synth --quiet --no-notices "${ctx[@]}" --output "$assembly") ||
		die "cdklocal synth failed (in infra/)"
	say "checking the templates against what LocalStack $t documents"
	if ! lsfarm check "$t" "$assembly"/*.template.json; then
		if [[ ${LOCALSTACK_SKIP_CHECK:-} == 1 ]]; then
			say "LOCALSTACK_SKIP_CHECK=1: deploying anyway"
		else
			die "the stack does not fit LocalStack $t (above; what to change: localstack/README.md, Troubleshooting). LOCALSTACK_SKIP_CHECK=1 deploys anyway"
		fi
	fi
	say "cdklocal bootstrap aws://000000000000/$AWS_REGION"
	(cd "$root/infra" && "$cdk_bin/cdklocal" bootstrap --no-notices --app "$assembly" "aws://000000000000/$AWS_REGION") ||
		die "cdklocal bootstrap failed"
	say "cdklocal deploy $stack"
	rm -f "$outputs"
	(cd "$root/infra" && "$cdk_bin/cdklocal" deploy --no-notices --app "$assembly" --require-approval never \
		--outputs-file "$outputs" "$stack") || die "cdklocal deploy failed (LocalStack's log: docker compose -p $project logs localstack)"
	lsfarm outputs "$outputs" "$stack" >/dev/null || die "the stack's outputs lack what e2e needs (above)"
	say "deployed; outputs in $outputs. Next: make localstack-e2e"
}

# --- e2e ------------------------------------------------------------------

pids=()
work=""
cleanup() {
	local rc=$?
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [[ -n $work ]]; then
		if ((rc == 0)) && [[ -z ${KEEP:-} ]]; then
			rm -rf "$work"
		else
			printf 'localstack/run.sh: logs and agent state kept in %s\n' "$work" >&2
		fi
	fi
}

wait_for() { # wait_for SECONDS WHAT CMD...
	local limit=$1 what=$2 start=$SECONDS
	shift 2
	printf '==> waiting for %s ' "$what"
	until "$@" >/dev/null 2>&1; do
		((SECONDS - start > limit)) && {
			echo
			return 1
		}
		printf '.'
		sleep 1
	done
	printf ' ok\n'
}

cmd_e2e() {
	require_up
	[[ -f $outputs ]] || die "no $outputs: run 'make localstack-deploy' first"
	need go "install Go"
	need curl "install curl"
	need puppet "install Puppet's agent (Debian: apt-get install puppet-agent; or scripts/install-deps.sh)"
	aws_env
	local t
	t=$(tier)
	local assignments
	assignments=$(lsfarm outputs "$outputs" "$stack") || die "cannot read the stack's outputs from $outputs (above)"
	eval "$assignments"
	local port=${E2E_PORT:-18140} admin_port=${E2E_ADMIN_PORT:-19141} metrics_port=${E2E_METRICS_PORT:-19140}
	local certname=${E2E_CERTNAME:-agent-$(date +%s).localstack.test}
	work=$(mktemp -d "${TMPDIR:-/tmp}/compilefarm-localstack-e2e.XXXXXX")
	trap cleanup EXIT

	say "building broker$([[ $t == free ]] && echo ' and the compile function bootstrap')"
	(cd "$root" && go build -o "$build/broker" ./broker) || die "go build ./broker failed"
	local broker="$build/broker"

	# The CA's key: the stack's KMS key (output CAKmsKey; LocalStack's KMS
	# signs). E2E_CA_KEY=secret, or a stack without the output (made with
	# caKeySecret), takes a Secrets Manager secret instead, which ca init
	# creates (2048 bits: quicker to make); runsh_test.go's loopback run uses
	# it.
	local ca_key=() init_args=()
	if [[ ${E2E_CA_KEY:-} != secret && -n ${CF_CA_KMS_KEY:-} ]]; then
		ca_key=(--ca-key-kms "$CF_CA_KMS_KEY")
	else
		ca_key=(--ca-key-secret "${CF_CA_KEY_SECRET:-compilefarm/$stage/ca-key}")
		init_args=(--key-bits 2048)
	fi
	say "CA: broker ca init --ca-table $CF_CA_TABLE ${ca_key[*]}"
	# Idempotent: a CA made by an earlier run is loaded and kept.
	local out
	if ! out=$("$broker" ca init --ca-table "$CF_CA_TABLE" "${ca_key[@]}" "${init_args[@]}" 2>&1); then
		die "broker ca init failed: $out"
	fi
	printf '%s\n' "$out" | grep -v '^time=' || true

	export COMPILEFARM_BUCKET=$CF_BUCKET COMPILEFARM_NODES_TABLE=$CF_NODES_TABLE \
		COMPILEFARM_NODE_INDEX_TABLE=$CF_NODE_INDEX_TABLE COMPILEFARM_ENVIRONMENTS_TABLE=$CF_ENVIRONMENTS_TABLE \
		COMPILEFARM_URGENT_QUEUE_URL=$CF_URGENT_QUEUE_URL COMPILEFARM_BULK_QUEUE_URL=$CF_BULK_QUEUE_URL
	if [[ $t == free ]]; then
		# LocalStack Free cannot run the container-image compile function:
		# its real bootstrap runs here, fed from both queues the way the
		# event source mappings feed it on AWS (internal/lambdaruntime).
		(cd "$root" && go build -o "$build/bootstrap" ./functions/compile) || die "go build ./functions/compile failed"
		need ruby "install Ruby and Puppet 7 (scripts/install-deps.sh): the compile function's worker runs Ruby Puppet"
		say "compiles: the compile function's bootstrap on this host (log: $work/compile.log)"
		COMPILEFARM_WORKDIR="$work/compile" "$build/lsfarm" compile --bootstrap "$build/bootstrap" \
			--urgent-queue-url "$CF_URGENT_QUEUE_URL" --bulk-queue-url "$CF_BULK_QUEUE_URL" >"$work/compile.log" 2>&1 &
		pids+=($!)
	else
		say "compiles: the deployed compile function (LocalStack Lambda, event source mappings on both queues)"
	fi

	say "front door: broker serve --backend aws on 127.0.0.1:$port (log: $work/serve.log)"
	"$broker" serve --backend aws --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin_port" \
		--metrics-listen "127.0.0.1:$metrics_port" --certname localstack-door.localstack.test \
		--bucket "$CF_BUCKET" --nodes-table "$CF_NODES_TABLE" --node-index-table "$CF_NODE_INDEX_TABLE" \
		--environments-table "$CF_ENVIRONMENTS_TABLE" --urgent-queue-url "$CF_URGENT_QUEUE_URL" \
		--bulk-queue-url "$CF_BULK_QUEUE_URL" --ca-table "$CF_CA_TABLE" "${ca_key[@]}" \
		--environments "$root/examples/environments" --autosign --work "$work/serve" \
		--first-compile-wait "${E2E_FIRST_COMPILE_WAIT:-4m}" >"$work/serve.log" 2>&1 &
	pids+=($!)
	wait_for 60 "the front door" curl -fsk "https://127.0.0.1:$port/status/v1/simple" ||
		die "broker serve did not come up: $(tail -n 20 "$work/serve.log")"

	# Operator commands run the operator API in their own process on the
	# stage's resources (--backend aws), as an operator's laptop does on AWS.
	local stage_flags=(--backend aws --bucket "$CF_BUCKET" --nodes-table "$CF_NODES_TABLE"
		--node-index-table "$CF_NODE_INDEX_TABLE" --environments-table "$CF_ENVIRONMENTS_TABLE"
		--urgent-queue-url "$CF_URGENT_QUEUE_URL" --bulk-queue-url "$CF_BULK_QUEUE_URL"
		--ca-table "$CF_CA_TABLE" "${ca_key[@]}")
	say "broker code deploy production --from examples/environments/production --backend aws"
	"$broker" code deploy production --environments "$root/examples/environments" \
		--from "$root/examples/environments/production" --detach "${stage_flags[@]}" ||
		die "broker code deploy --backend aws failed"

	local server=localhost
	[[ -n ${E2E_SERVER:-} ]] && { server=${E2E_SERVER%:*}; port=${E2E_SERVER##*:}; }
	local a="$work/agent"
	mkdir -p "$a" "$work/root"
	local agent=(puppet agent -t --certname "$certname" --server "$server" --serverport "$port"
		--confdir "$a/conf" --vardir "$a/var" --ssldir "$a/ssl" --codedir "$a/code" --logdir "$a/log"
		--rundir "$a/run" --publicdir "$a/public" --http_read_timeout 300)
	say "puppet agent -t --certname $certname --server $server --serverport $port (the first compile may take minutes)"
	if [[ $t == free ]] && ! kill -0 "${pids[0]}" 2>/dev/null; then
		die "the local compile function stopped: $(tail -n 30 "$work/compile.log")"
	fi
	local rc=0
	FACTER_cf_root="$work/root" "${agent[@]}" > >(tee "$work/agent-1.log") 2>&1 || rc=$?
	if ((rc != 0 && rc != 2)); then
		[[ $t == free ]] && tail -n 30 "$work/compile.log" >&2
		die "puppet agent exited $rc (0 or 2 expected); front door log: $work/serve.log"
	fi
	say "puppet agent exited $rc"

	say "broker nodes --backend aws"
	local nodes
	nodes=$("$broker" nodes "${stage_flags[@]}") || die "broker nodes --backend aws failed"
	printf '%s\n' "$nodes"
	grep -q "$certname" <<<"$nodes" || die "$certname is not in broker nodes"

	rc=0
	FACTER_cf_root="$work/root" "${agent[@]}" >"$work/agent-2.log" 2>&1 || rc=$?
	say "second run exited $rc (0: nothing to change, the farm compiled nothing)"
	((rc == 0 || rc == 2)) || die "the second agent run exited $rc: $work/agent-2.log"
	if [[ $t == pro && -n ${CF_LOAD_BALANCER_DNS:-} ]]; then
		say "the fleet's NLB is $CF_LOAD_BALANCER_DNS; E2E_SERVER=HOST:PORT points the agent at it (not documented for TCP by LocalStack)"
	fi
	say "e2e passed: a real puppet agent run against the farm on LocalStack ($t)"
}

case ${1:-} in
up) cmd_up ;;
deploy) cmd_deploy ;;
e2e) cmd_e2e ;;
down) cmd_down ;;
status) cmd_status ;;
context) cmd_context ;;
*)
	sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
