#!/usr/bin/env bash
# Sets lbkit's ready proxy (examples/proxy) beside nginx, and beside a bare
# Go httputil.ReverseProxy (lbload proxy, with Go's defaults and tuned), in
# front of the same four loopback backends that answer at once, and prints
# what each costs per request: CPU µs per request and requests per second,
# each as a ratio of nginx's. Run by hand, as root, on a machine with two
# cores or more; CI does not run it.
#
#   bash bench/sidebyside/run.sh                       # 3 rounds of 200,000 requests each
#   N=100000 ROUNDS=5 ALGO=leastconn bash bench/sidebyside/run.sh
#   VARIANTS="nginx lbkit" bash bench/sidebyside/run.sh
#
# VARIANTS are the proxies measured, in the table's order: nginx, lbkit
# (the ready proxy, ALGO, with PROXY_FLAGS), go-tuned and go-plain (the
# bare ReverseProxy, tuned and not). The proxy under test (nginx with one
# worker, or a Go proxy, whose runtime then sees one CPU) is pinned to core
# PROXY_CPU (0); the backends and the load generator (lbload, 64 keep-alive
# connections) share core LOAD_CPU (1). Each round runs every variant in
# turn, so that a change in the machine's load hits them all; the table
# gives each one's median, and its ratios to the first row are medians of
# the rounds' ratios. CPU per request is read from /proc (the proxy's
# user and system time over the measured requests), and moves much less
# with other load on the machine than requests per second do; the load
# average is printed before and after.
#
# nginx comes from Debian's packages, installed if missing (apt-get).
# Extra flags for lbkit's proxy go in PROXY_FLAGS.
set -euo pipefail
cd "$(dirname "$0")/../.."

N=${N:-200000}
C=${C:-64}
ROUNDS=${ROUNDS:-3}
ALGO=${ALGO:-rr}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
PROXY_FLAGS=${PROXY_FLAGS:-}
VARIANTS=${VARIANTS:-nginx lbkit go-tuned go-plain}
BACKENDS=127.0.0.1:9101,127.0.0.1:9102,127.0.0.1:9103,127.0.0.1:9104

nginx_bin=$(command -v nginx || true)
if [[ -z "$nginx_bin" && -x /usr/sbin/nginx ]]; then
	nginx_bin=/usr/sbin/nginx
fi
if [[ -z "$nginx_bin" ]]; then
	echo "== installing nginx from Debian's packages" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null 2>&1 ||
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null
	nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
fi

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

echo "== building lbload and the proxy" >&2
go build -o "$work/lbload" ./bench/cmd/lbload
go build -o "$work/proxy" ./examples/proxy

# wait_port waits up to 10 s for something to listen on 127.0.0.1:$1.
wait_port() {
	for _ in $(seq 100); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	echo "nothing listens on 127.0.0.1:$1" >&2
	return 1
}

# stop ends a process started in the background and waits for it.
stop() {
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

taskset -c "$LOAD_CPU" "$work/lbload" backends -listen "$BACKENDS" 2>/dev/null &
pids+=($!)
wait_port 9104

mkdir -p "$work/nginx/tmp"
cp bench/sidebyside/nginx.conf "$work/nginx/nginx.conf"

load() { # label pid url
	taskset -c "$LOAD_CPU" "$work/lbload" run -url "$3" -n "$N" -c "$C" -pid "$1=$2" -label "$1" -tsv "$work/runs.tsv"
}

# start VARIANT: starts the proxy VARIANT names, pinned, and sets pid and url.
start() {
	case "$1" in
	nginx)
		taskset -c "$PROXY_CPU" "$nginx_bin" -p "$work/nginx/" -c "$work/nginx/nginx.conf" &
		pid=$! url=http://127.0.0.1:9200/ port=9200
		;;
	lbkit)
		# shellcheck disable=SC2086 # PROXY_FLAGS is a list of flags
		taskset -c "$PROXY_CPU" "$work/proxy" -listen 127.0.0.1:9201 -backends "$BACKENDS" -algo "$ALGO" $PROXY_FLAGS 2>"$work/proxy.log" &
		pid=$! url=http://127.0.0.1:9201/ port=9201
		;;
	go-tuned | go-plain)
		local tuned=false
		[[ "$1" == go-tuned ]] && tuned=true
		taskset -c "$PROXY_CPU" "$work/lbload" proxy -listen 127.0.0.1:9202 -backends "$BACKENDS" -tuned="$tuned" 2>"$work/$1.log" &
		pid=$! url=http://127.0.0.1:9202/ port=9202
		;;
	*)
		echo "unknown variant $1 (nginx, lbkit, go-tuned, go-plain)" >&2
		exit 2
		;;
	esac
	pids+=("$pid")
	wait_port "$port"
}

echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for round in $(seq "$ROUNDS"); do
	echo "== round $round of $ROUNDS" >&2
	for v in $VARIANTS; do
		start "$v"
		label=$v
		[[ "$v" == lbkit ]] && label="lbkit-$ALGO"
		load "$label" "$pid" "$url"
		stop "$pid"
	done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "$N requests per run, $C connections; proxy on core $PROXY_CPU, backends and load on core $LOAD_CPU; medians of $ROUNDS rounds; ×first: the median of each round's ratio to the first row's run; load average after: $load_after"
"$work/lbload" report "$work/runs.tsv"
