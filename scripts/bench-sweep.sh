#!/usr/bin/env bash
# Sweeps message sizes on loopback: `rdma-container bench --transport tcp --mode bw` against
# iperf3 (bandwidth) and sockperf throughput --tcp (message rate) at the same sizes, and writes
# one JSON line per tool and size:
#   {"tool", "size", "gbit_per_second", "msg_rate_mpps", "seconds", "date", "machine"}
# gbit_per_second is 10^9 bits per second, msg_rate_mpps 10^6 messages per second. Each tool
# measures one of the two and the other follows from the size: iperf3's message rate is its
# writes of SIZE bytes per second, sockperf's bandwidth is its message rate times SIZE.
# sockperf refuses messages above 65507 bytes, so it has no point at 64 KiB and above.
# scripts/bench-plot.py draws the file (docs/bench-sweep.svg).
#
# Like scripts/bench-compare.sh: only 127.0.0.1, servers pinned to CPU 1 and clients to CPU 0
# (when the machine has two), for ours and the reference alike; Nagle on for both (sockperf's
# throughput default, our data connection's). Our queue depth is 4 MiB in flight, at least 16
# and at most 1024 messages (1024 at 64 B, as bench-compare's 64 B row; 64 at 64 KiB, as its
# 64 KiB row; 16 at 1 MiB).
set -euo pipefail

usage() {
	cat <<'EOF'
usage: scripts/bench-sweep.sh [--binary PATH] [--seconds N] [--sizes "64 256 ..."] [--out FILE]

  --binary PATH   the rdma-container binary to measure (default: cargo build --release)
  --seconds N     length of each timed run (default 3)
  --sizes LIST    message sizes in bytes (default "64 256 1024 4096 16384 65536 262144 1048576")
  --out FILE      the JSON lines file to write (default bench-sweep.jsonl)

Then: python3 scripts/bench-plot.py FILE docs/bench-sweep.svg
Installs iperf3, sockperf and jq with apt-get when they are missing (as root).
Exit status: 0 when every run produced a number, 1 when one failed, 64 on a usage error.
EOF
}

binary=""
seconds=3
sizes="64 256 1024 4096 16384 65536 262144 1048576"
out="bench-sweep.jsonl"
while [ $# -gt 0 ]; do
	case "$1" in
	--binary) binary=${2:?}; shift 2 ;;
	--seconds) seconds=${2:?}; shift 2 ;;
	--sizes) sizes=${2:?}; shift 2 ;;
	--out) out=${2:?}; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; exit 64 ;;
	esac
done
case "$seconds" in '' | *[!0-9]*) usage >&2; exit 64 ;; esac
[ "$seconds" -ge 1 ] || { usage >&2; exit 64; }
for s in $sizes; do
	case "$s" in *[!0-9]*) usage >&2; exit 64 ;; esac
	[ "$s" -ge 1 ] || { usage >&2; exit 64; }
done
# the output path is taken relative to where the script was started
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
case "$binary" in '' | /*) ;; *) binary="$PWD/$binary" ;; esac

cd "$(dirname "$0")/.."
for tool in iperf3 sockperf jq taskset; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		if [ "$(id -u)" -eq 0 ]; then
			apt-get update -qq >/dev/null
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
				iperf3 sockperf jq util-linux >/dev/null
			break
		fi
		echo "bench-sweep: $tool is missing (apt-get install iperf3 sockperf jq util-linux)" >&2
		exit 1
	fi
done
if [ -z "$binary" ]; then
	cargo build --release --locked --quiet
	binary=${CARGO_TARGET_DIR:-target}/release/rdma-container
fi

if [ "$(nproc)" -ge 2 ]; then
	server_pin=(taskset -c 1)
	client_pin=(taskset -c 0)
else
	server_pin=()
	client_pin=()
fi
work=$(mktemp -d)
pids=()
cleanup() {
	# sockperf's server ignores SIGTERM and stops on SIGINT
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; kill -INT "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
machine="$(nproc) CPU(s), ${cpu:-unknown CPU}, Linux $(uname -r)"
port=$((20000 + RANDOM % 20000))
next_port() { port=$((port + 1)); }
failed=0
: >"$out"

# record TOOL SIZE GBIT MPPS: one JSON line (a missing figure fails the run and writes nothing)
record() {
	local tool=$1 size=$2 gbit=$3 mpps=$4
	if [ -z "$gbit" ] || [ -z "$mpps" ]; then
		echo "bench-sweep: $tool at $size B produced no number" >&2
		failed=1
		return
	fi
	jq -cn --arg tool "$tool" --argjson size "$size" --argjson gbit "$gbit" --argjson mpps "$mpps" \
		--argjson seconds "$seconds" --arg date "$date" --arg machine "$machine" \
		'{tool: $tool, size: $size, gbit_per_second: $gbit, msg_rate_mpps: $mpps,
		  seconds: $seconds, date: $date, machine: $machine}' >>"$out"
	printf '%-22s %8s B %10.3f Gb/s %10.4f Mmsg/s\n' "$tool" "$size" "$gbit" "$mpps"
}

# --- ours: bench bw, one server per size (stopped after its client: it would wait for another) -
for size in $sizes; do
	credits=$((4194304 / size))
	[ "$credits" -gt 1024 ] && credits=1024
	[ "$credits" -lt 16 ] && credits=16
	next_port
	"${server_pin[@]}" "$binary" bench --server "127.0.0.1:$port" --once --transport tcp \
		>"$work/server-$size.log" 2>&1 &
	spid=$!
	pids+=("$spid")
	sleep 0.3
	res=$("${client_pin[@]}" "$binary" bench --client "127.0.0.1:$port" --transport tcp --mode bw \
		-s "$size" -D "$seconds" --credits "$credits" --json 2>"$work/client-$size.log" || true)
	kill "$spid" 2>/dev/null || true
	wait "$spid" 2>/dev/null || true
	# the message rate is the measurement; the bandwidth is rate x size in 10^9 bit/s, as iperf3's
	mpps=$(jq -r '.results[0].msg_rate_mpps // empty' <<<"$res" 2>/dev/null || true)
	gbit=""
	[ -n "$mpps" ] && gbit=$(awk -v r="$mpps" -v s="$size" 'BEGIN { printf "%.9g", r * s * 8 / 1000 }')
	record "rdma-container (tcp)" "$size" "$gbit" "$mpps"
done

# --- iperf3: -l SIZE writes for SECONDS, the receiver's figure ---------------------------------
for size in $sizes; do
	next_port
	"${server_pin[@]}" iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
	spid=$!
	pids+=("$spid")
	sleep 0.3
	res=$("${client_pin[@]}" iperf3 -c 127.0.0.1 -p "$port" -l "$size" -t "$seconds" -J 2>/dev/null || true)
	wait "$spid" 2>/dev/null || true
	gbit=$(jq -r '.end.sum_received.bits_per_second / 1e9 // empty' <<<"$res" 2>/dev/null || true)
	mpps=""
	[ -n "$gbit" ] && mpps=$(awk -v g="$gbit" -v s="$size" 'BEGIN { printf "%.9g", g * 1000 / (s * 8) }')
	record "iperf3" "$size" "$gbit" "$mpps"
done

# --- sockperf throughput --tcp: messages of SIZE for SECONDS, the sender's rate ---------------
next_port
"${server_pin[@]}" sockperf server --tcp -i 127.0.0.1 -p "$port" >/dev/null 2>&1 &
sockperf_pid=$!
pids+=("$sockperf_pid")
sleep 0.5
for size in $sizes; do
	if [ "$size" -gt 65507 ]; then
		echo "bench-sweep: sockperf does not send $size B messages (65507 at most): no point" >&2
		continue
	fi
	rate=$("${client_pin[@]}" sockperf throughput --tcp -i 127.0.0.1 -p "$port" -m "$size" -t "$seconds" 2>&1 |
		sed -n 's/.*Summary: Message Rate is \([0-9.]*\) \[msg\/sec\].*/\1/p' | tail -n 1 || true)
	gbit=""
	mpps=""
	if [ -n "$rate" ]; then
		mpps=$(awk -v r="$rate" 'BEGIN { printf "%.9g", r / 1e6 }')
		gbit=$(awk -v r="$rate" -v s="$size" 'BEGIN { printf "%.9g", r * s * 8 / 1e9 }')
	fi
	record "sockperf" "$size" "$gbit" "$mpps"
done
# SIGINT stops it; after a refused client it has been seen to need a second one
for _ in 1 2 3 4 5 6 7 8 9 10; do
	state=$(awk '{ print $3 }' "/proc/$sockperf_pid/stat" 2>/dev/null || true)
	{ [ -z "$state" ] || [ "$state" = Z ]; } && break
	kill -INT "$sockperf_pid" 2>/dev/null || break
	sleep 0.2
done
kill -KILL "$sockperf_pid" 2>/dev/null || true
wait "$sockperf_pid" 2>/dev/null || true

echo "bench-sweep: $out ($machine, $date, ${seconds} s per point)"
if [ "$failed" -ne 0 ]; then
	for f in "$work"/*.log; do echo "--- $f"; tail -n 5 "$f"; done >&2
	exit 1
fi
