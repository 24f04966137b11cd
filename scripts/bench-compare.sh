#!/usr/bin/env bash
# Compares `rdma-container bench --transport tcp` with the reference tools on loopback, in one
# run, and prints a ratio table (ours / reference):
#   64 KiB bandwidth   bench bw  vs iperf3 (same bytes, same 64 KiB writes)
#   64 KiB, 4 conns    bench bw --qps 4 vs iperf3 -P 4, and ours --qps 4 vs --qps 1, and
#                      --qps 4 over two paths (--paths 127.0.0.2, both on lo) vs one
#   64 B message rate  bench bw  vs sockperf throughput --tcp (same message size and duration;
#                      both with Nagle on: sockperf's throughput default, our data connection's)
#   14 B latency       bench lat vs sockperf ping-pong --tcp (average one-way latency; 14 B is
#                      the smallest message sockperf sends)
#   another build      with --baseline-binary: 64 KiB bench bw and 14 B bench lat, this build
#                      vs that one, alternated twice (the --qps 1 regression check, issue 39)
#   system calls       per 64 B message on each side of bench bw (perf stat's syscall count, or
#                      strace -c -f without perf; 250,000 minus 50,000 messages), against the
#                      targets (sender 1, receiver 0.2)
# Queue depths match what the reference keeps in flight. The 64 KiB runs use 64 credits
# (--credits): 64 x 64 KiB = 4 MiB, the kernel's largest send buffer (tcp_wmem), which iperf3's
# autotuned socket reaches on loopback; 16 (bench's own default, perftest's -t in the VM
# comparison) keeps a quarter of that in flight and measured 0.6-0.8x iperf3 here.
# The 64 B runs (bench, the CLI, the system calls) use a queue of 1024 messages (--rate-credits):
# sockperf has no flow control at all, only its socket buffers, and with a queue of 256 or more
# our tcp receiver coalesces a running stream (docs/design.md, "tcp"); 1024 slots of 64 B are
# 64 KiB, about one loopback segment.
#   the CLI            `--server --quiet` / `--client --size` at 64 KiB and 64 B against bench bw
#                      at the same size, count and credits, run back to back three times (the medians;
#                      the CLI's figure is the receiving server's own rate); at 64 KiB also with
#                      --resume-timeout 0, bench's data path (the CLI resumes by default, bench not)
# Servers are pinned to CPU 1 and clients to CPU 0 (when the machine has two), for ours and the
# reference alike. Only 127.0.0.1 is used. Ratios are printed, not judged.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: scripts/bench-compare.sh [--binary PATH] [--baseline-binary PATH] [--seconds N]
                                [--credits N] [--json FILE]

  --binary PATH   the rdma-container binary to measure (default: cargo build --release)
  --baseline-binary PATH
                  also compare with another build (an earlier commit's), back to back in
                  the same run: 64 KiB bench bw and 14 B bench lat, twice each, alternated
  --seconds N     length of each timed run (default 5)
  --credits N     our queue depth for the 64 KiB runs (default 64)
  --rate-credits N  our queue depth for the 64 B runs (default 1024)
  --json FILE     also write the table as JSON

Installs iperf3, sockperf, jq and strace with apt-get when they are missing (as root); counts
system calls with perf stat when it works here (more faithful), else strace.
Exit status: 0 when every run produced a number, 1 when one failed, 64 on a usage error.
EOF
}

binary=""
baseline=""
seconds=5
credits=64
rate_credits=1024
json_out=""
while [ $# -gt 0 ]; do
	case "$1" in
	--binary) binary=${2:?}; shift 2 ;;
	--baseline-binary) baseline=${2:?}; shift 2 ;;
	--seconds) seconds=${2:?}; shift 2 ;;
	--credits) credits=${2:?}; shift 2 ;;
	--rate-credits) rate_credits=${2:?}; shift 2 ;;
	--json) json_out=${2:?}; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; exit 64 ;;
	esac
done
case "$seconds$credits$rate_credits" in *[!0-9]*) usage >&2; exit 64 ;; esac
if [ -n "$baseline" ] && [ ! -x "$baseline" ]; then
	echo "bench-compare: --baseline-binary $baseline is not an executable file" >&2
	exit 64
fi

cd "$(dirname "$0")/.."
for tool in iperf3 sockperf jq taskset strace; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		if [ "$(id -u)" -eq 0 ]; then
			apt-get update -qq >/dev/null
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
				iperf3 sockperf jq util-linux strace >/dev/null
			break
		fi
		echo "bench-compare: $tool is missing (apt-get install iperf3 sockperf jq util-linux strace)" >&2
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
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

port=$((20000 + RANDOM % 20000))
next_port() { port=$((port + 1)); }
failed=0
rows=()

# row NAME UNIT OURS REF BETTER: BETTER is "higher" or "lower"
row() {
	local name=$1 unit=$2 ours=$3 ref=$4 better=$5 ratio
	if [ -z "$ours" ] || [ -z "$ref" ]; then
		failed=1
		ratio="n/a"
	else
		ratio=$(awk -v a="$ours" -v b="$ref" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
	fi
	rows+=("$name|$unit|${ours:-FAILED}|${ref:-FAILED}|$ratio|$better")
}

bench_server() {
	"${server_pin[@]}" "$binary" bench --server "127.0.0.1:$port" --once --transport tcp >"$work/server.log" 2>&1 &
	pids+=($!)
	sleep 0.3
}

# --- 64 KiB bandwidth: ours vs iperf3, the same bytes in 64 KiB writes -------------------------
iters=$((seconds * 20000))
next_port
bench_server
ours_bw=$("${client_pin[@]}" "$binary" bench --client "127.0.0.1:$port" --transport tcp \
	-s 65536 -n "$iters" --credits "$credits" --json 2>"$work/c1.log" |
	jq -r '.results[0].bw_average' 2>/dev/null || true)
next_port
"${server_pin[@]}" iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
pids+=($!)
sleep 0.3
ref_bw=$("${client_pin[@]}" iperf3 -c 127.0.0.1 -p "$port" -l 65536 -n $((iters * 65536)) -J 2>/dev/null |
	jq -r '.end.sum_received.bits_per_second / 8 / 1048576' 2>/dev/null || true)
row "64 KiB bandwidth (bench bw vs iperf3)" "MiB/s" "$ours_bw" "$ref_bw" higher

# --- 64 KiB over 4 data connections: bench --qps 4 vs iperf3 -P 4 (issue 39) ------------------
# One ordered stream striped over four data connections against iperf3's four parallel
# streams; then ours over four against ours over one (the row above): what striping costs or
# gives on this host (on loopback with 2 CPUs, the CPU, not a link, is the limit).
next_port
bench_server
ours_bw4=$("${client_pin[@]}" "$binary" bench --client "127.0.0.1:$port" --transport tcp \
	-s 65536 -n "$iters" --credits "$credits" --qps 4 --json 2>"$work/c-qps.log" |
	jq -r '.results[0].bw_average' 2>/dev/null || true)
next_port
"${server_pin[@]}" iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
pids+=($!)
sleep 0.3
ref_bw4=$("${client_pin[@]}" iperf3 -c 127.0.0.1 -p "$port" -l 65536 -P 4 -n $((iters * 65536)) -J 2>/dev/null |
	jq -r '.end.sum_received.bits_per_second / 8 / 1048576' 2>/dev/null || true)
row "64 KiB, 4 conns (bench --qps 4 vs iperf3 -P 4)" "MiB/s" "$ours_bw4" "$ref_bw4" higher
row "64 KiB bandwidth, bench --qps 4 vs --qps 1" "MiB/s" "$ours_bw4" "$ours_bw" higher
# The same four over two paths (--paths 127.0.0.2: both on lo here) against one path: what
# paths cost (loopback has one device, so it cannot show what a second NIC gives).
next_port
bench_server
ours_paths=$("${client_pin[@]}" "$binary" bench --client "127.0.0.1:$port" --transport tcp \
	-s 65536 -n "$iters" --credits "$credits" --qps 4 --paths 127.0.0.2 --json 2>"$work/c-paths.log" |
	jq -r '.results[0].bw_average' 2>/dev/null || true)
row "64 KiB, --qps 4 over 2 paths vs 1 path (loopback)" "MiB/s" "$ours_paths" "$ours_bw4" higher

# --- 64 KiB: the sender's copy (send) against none (send_in_place), back to back ------------------
# bench --in-place produces each message in its staging slot (every byte written once) where send
# copies it there from a buffer: what an application that builds its messages in place saves. The
# copy alone, on one core (examples/copy_cost.rs), is printed after the table as the physical
# reference.
inplace_pair() { # --in-place or nothing -> bw_average
	next_port
	bench_server
	"${client_pin[@]}" "$binary" bench --client "127.0.0.1:$port" --transport tcp \
		-s 65536 -n "$iters" --credits "$credits" --json "$@" 2>"$work/c-inplace.log" |
		jq -r '.results[0].bw_average' 2>/dev/null || true
}
copy_bw=$(inplace_pair)
inplace_bw=$(inplace_pair --in-place)
row "64 KiB bandwidth, bench --in-place vs send" "MiB/s" "$inplace_bw" "$copy_bw" higher
copy_cost=""
if cargo build --release --locked --quiet --example copy_cost 2>"$work/copy-cost-build.log"; then
	copy_cost=$("${client_pin[@]}" "${CARGO_TARGET_DIR:-target}/release/examples/copy_cost" \
		--size 65536 --slots "$credits" --seconds 2 2>/dev/null || true)
fi

# --- 64 B message rate: ours vs sockperf throughput --------------------------------------------
next_port
bench_server
ours_rate=$("${client_pin[@]}" "$binary" bench --client "127.0.0.1:$port" --transport tcp \
	-s 64 -D "$seconds" --credits "$rate_credits" --json 2>"$work/c2.log" |
	jq -r '.results[0].msg_rate_mpps * 1000000' 2>/dev/null || true)
next_port
"${server_pin[@]}" sockperf server --tcp -i 127.0.0.1 -p "$port" >/dev/null 2>&1 &
pids+=($!)
sleep 0.5
ref_rate=$("${client_pin[@]}" sockperf throughput --tcp -i 127.0.0.1 -p "$port" -m 64 -t "$seconds" 2>&1 |
	sed -n 's/.*Summary: Message Rate is \([0-9.]*\) \[msg\/sec\].*/\1/p' | tail -n 1)
row "64 B message rate (bench bw vs sockperf tp)" "msg/s" "$ours_rate" "$ref_rate" higher

# --- the CLI against bench, same sizes, back to back: --server --quiet / --client --size ------
# Each figure swings by tens of percent from one moment to the next on a shared machine, so the
# CLI is not compared with the bench figure of the rows above: bench and the CLI run back to
# back, three times (bench, CLI, bench, CLI, bench, CLI), with the same count and credits, and
# the row compares the two medians (a run's figure is bimodal here: one slow run moved a mean
# of two by 20%).
# cli_rate SIZE COUNT CREDITS FIELD: the server's "received ..." line, FIELD "msg/s" or "MiB/s";
# cli_extra: more flags for both ends of the CLI
cli_extra=()
cli_rate() {
	local size=$1 count=$2 cr=$3 field=$4 max=$1
	[ "$max" -lt 512 ] && max=512
	next_port
	"${server_pin[@]}" "$binary" --server "127.0.0.1:$port" --transport tcp --quiet --once \
		--credits "$cr" --max-msg-size "$max" "${cli_extra[@]}" >/dev/null 2>"$work/cli-server-$size.log" &
	local spid=$!
	pids+=("$spid")
	sleep 0.3
	# a client that failed leaves the --once server waiting: end it (this may run in a
	# subshell, whose pids the cleanup does not see)
	"${client_pin[@]}" "$binary" --client "127.0.0.1:$port" --transport tcp --size "$size" \
		--count "$count" --credits "$cr" --max-msg-size "$max" "${cli_extra[@]}" >/dev/null 2>"$work/cli-client-$size.log" ||
		kill "$spid" 2>/dev/null || true
	wait "$spid" 2>/dev/null || true
	sed -n "s/.*end of stream: received .*(\([0-9.]*\) msg\/s, \([0-9.]*\) MiB\/s.*/\1 \2/p" \
		"$work/cli-server-$size.log" | awk -v f="$field" '{ print (f == "msg/s") ? $1 : $2 }' | tail -n 1
}
# bench_rate SIZE COUNT CREDITS FIELD: bench bw with the same count, the same figure
bench_rate() {
	local size=$1 count=$2 cr=$3 field=$4
	next_port
	bench_server
	"${client_pin[@]}" "$binary" bench --client "127.0.0.1:$port" --transport tcp \
		-s "$size" -n "$count" --credits "$cr" --json 2>"$work/bench-pair-$size.log" |
		jq -r --arg f "$field" 'if $f == "msg/s" then .results[0].msg_rate_mpps * 1000000 else .results[0].bw_average end' 2>/dev/null || true
	# this runs in a subshell, whose pids the cleanup does not see: end the --once server here
	# (done with the run, or left waiting by a client that failed)
	kill "${pids[-1]}" 2>/dev/null || true
	wait "${pids[-1]}" 2>/dev/null || true
}
# median_of N...: the middle of three numbers
median_of() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
# cli_pair SIZE COUNT CREDITS FIELD: "CLI_MEDIAN BENCH_MEDIAN" over three back-to-back rounds
cli_pair() {
	local cli=() bench=() b c i
	for i in 1 2 3; do
		# each runs in a subshell, whose next_port the parent does not see: step past its port
		b=$(bench_rate "$@")
		next_port
		c=$(cli_rate "$@")
		next_port
		[ -n "$b" ] && [ -n "$c" ] || return 0
		bench+=("$b")
		cli+=("$c")
	done
	printf '%s %s\n' "$(median_of "${cli[@]}")" "$(median_of "${bench[@]}")"
}
# cli_pair runs in a subshell: the parent steps past the six ports it used (a port a session
# just closed may still be in TIME_WAIT, which a reference tool's bind does not take)
read -r cli_bw pair_bw <<<"$(cli_pair 65536 $((seconds * 10000)) "$credits" MiB/s)" || true
port=$((port + 6))
row "64 KiB bandwidth (CLI vs bench bw, target 0.95)" "MiB/s" "${cli_bw:-}" "${pair_bw:-}" higher
# The CLI resumes after a break unless told (--resume-timeout 10 s), bench does not: a resuming
# sender keeps each message in its slot until the receiver released it, so at 64 credits every
# send copies into a slot last written 64 messages (4 MiB) earlier, out of the core's cache,
# where bench's sender reuses one slot. The same pair with the CLI on bench's data path:
cli_extra=(--resume-timeout 0)
read -r cli_bw0 pair_bw0 <<<"$(cli_pair 65536 $((seconds * 10000)) "$credits" MiB/s)" || true
port=$((port + 6))
cli_extra=()
row "64 KiB bandwidth (CLI --resume-timeout 0 vs bench bw)" "MiB/s" "${cli_bw0:-}" "${pair_bw0:-}" higher
read -r cli_msgs pair_msgs <<<"$(cli_pair 64 $((seconds * 200000)) "$rate_credits" msg/s)" || true
port=$((port + 6))
row "64 B message rate (CLI vs bench bw, target 0.95)" "msg/s" "${cli_msgs:-}" "${pair_msgs:-}" higher

# --- 2 B latency: ours vs sockperf ping-pong (both one-way = half the round trip) --------------
next_port
bench_server
ours_lat=$("${client_pin[@]}" "$binary" bench --client "127.0.0.1:$port" --transport tcp \
	--mode lat -s 14 -D "$seconds" --json 2>"$work/c3.log" |
	jq -r '.results[0].t_avg_us' 2>/dev/null || true)
next_port
"${server_pin[@]}" sockperf server --tcp -i 127.0.0.1 -p "$port" >/dev/null 2>&1 &
pids+=($!)
sleep 0.5
ref_lat=$("${client_pin[@]}" sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -m 14 -t "$seconds" 2>&1 |
	sed -n 's/.*Summary: Latency is \([0-9.]*\) usec.*/\1/p' | tail -n 1)
row "14 B latency, average (bench lat vs sockperf pp)" "usec" "$ours_lat" "$ref_lat" lower

# --- this build against another (--baseline-binary), back to back: bench bw 64 KiB, lat 14 B ----
# Alternated twice (this, baseline, this, baseline) and averaged: a regression check that holds
# on a shared machine only as a ratio within one run.
# bin_figure BINARY bw|lat PORT: bench bw's MiB/s at 64 KiB, or bench lat's average one-way usec
# at 14 B. Runs in a command substitution (a subshell): it takes its port as an argument and
# ends its own server (the --once server exits after its client; one whose client failed is
# killed).
bin_figure() {
	local bin=$1 mode=$2 p=$3 spid i
	"${server_pin[@]}" "$bin" bench --server "127.0.0.1:$p" --once --transport tcp >"$work/server-base.log" 2>&1 &
	spid=$!
	sleep 0.3
	if [ "$mode" = bw ]; then
		"${client_pin[@]}" "$bin" bench --client "127.0.0.1:$p" --transport tcp \
			-s 65536 -n "$iters" --credits "$credits" --json 2>"$work/c-base.log" |
			jq -r '.results[0].bw_average' 2>/dev/null || true
	else
		"${client_pin[@]}" "$bin" bench --client "127.0.0.1:$p" --transport tcp \
			--mode lat -s 14 -D "$seconds" --json 2>"$work/c-base.log" |
			jq -r '.results[0].t_avg_us' 2>/dev/null || true
	fi
	for ((i = 0; i < 50; i++)); do
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.1
	done
	kill "$spid" 2>/dev/null || true
	wait "$spid" 2>/dev/null || true
}
# bin_pair bw|lat FIRST_PORT: "THIS_MEAN BASELINE_MEAN" (uses FIRST_PORT to FIRST_PORT + 3)
bin_pair() {
	local a1 b1 a2 b2 p=$2
	a1=$(bin_figure "$binary" "$1" "$p")
	b1=$(bin_figure "$baseline" "$1" $((p + 1)))
	a2=$(bin_figure "$binary" "$1" $((p + 2)))
	b2=$(bin_figure "$baseline" "$1" $((p + 3)))
	if [ -n "$a1" ] && [ -n "$b1" ] && [ -n "$a2" ] && [ -n "$b2" ]; then
		awk -v a1="$a1" -v a2="$a2" -v b1="$b1" -v b2="$b2" 'BEGIN { printf "%.2f %.2f\n", (a1 + a2) / 2, (b1 + b2) / 2 }'
	fi
}
if [ -n "$baseline" ]; then
	read -r this_bw base_bw <<<"$(bin_pair bw $((port + 1)))" || true
	read -r this_lat base_lat <<<"$(bin_pair lat $((port + 5)))" || true
	port=$((port + 8))
	row "64 KiB bandwidth, this build vs --baseline-binary" "MiB/s" "${this_bw:-}" "${base_bw:-}" higher
	row "14 B latency, this build vs --baseline-binary" "usec" "${this_lat:-}" "${base_lat:-}" lower
fi

# --- system calls per message, steady state: the difference between two runs -----------------
# Counts every system call of each process (data, control, waits), so the set-up cancels out.
# perf stat counts them in the kernel (raw_syscalls:sys_enter) without slowing the process down;
# strace -c, the fallback, stops the process at every call, which changes how many messages
# each read finds (both ends run several times slower), so its figures are upper bounds.
if perf stat -x, -e raw_syscalls:sys_enter -o /dev/null true >/dev/null 2>&1; then
	counter=perf
elif command -v strace >/dev/null 2>&1; then
	counter=strace
else
	counter=""
fi
count_calls() { # OUT_FILE COMMAND... : runs COMMAND under the counter
	local out=$1
	shift
	if [ "$counter" = perf ]; then
		perf stat -x, -e raw_syscalls:sys_enter -o "$out" "$@"
	else
		strace -f -c -o "$out" "$@"
	fi
}
calls_total() { # counter output file -> total calls
	if [ "$counter" = perf ]; then
		awk -F, '/raw_syscalls:sys_enter/ { print $1 }' "$1"
	else
		awk '$NF == "total" { print $(NF-2) }' "$1"
	fi
}
syscall_run() { # message count -> "server_total client_total"
	local n=$1
	next_port
	count_calls "$work/st-server-$n.txt" "${server_pin[@]}" "$binary" bench --server "127.0.0.1:$port" --once \
		--transport tcp >"$work/server-st.log" 2>&1 &
	local spid=$!
	pids+=("$spid")
	sleep 0.5
	count_calls "$work/st-client-$n.txt" "${client_pin[@]}" "$binary" bench --client "127.0.0.1:$port" \
		--transport tcp -s 64 -n "$n" --credits "$rate_credits" >/dev/null 2>"$work/c-st.log" || true
	wait "$spid" 2>/dev/null || true
	echo "$(calls_total "$work/st-server-$n.txt") $(calls_total "$work/st-client-$n.txt")"
}
if [ -n "$counter" ]; then
	read -r s_lo c_lo <<<"$(syscall_run 50000)" || true
	read -r s_hi c_hi <<<"$(syscall_run 250000)" || true
	per_msg() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) / 200000 }'; }
	send_calls=$(per_msg "${c_lo:-}" "${c_hi:-}" || true)
	recv_calls=$(per_msg "${s_lo:-}" "${s_hi:-}" || true)
	row "calls per 64 B message, sender ($counter; target 1)" "calls" "$send_calls" 1 lower
	row "calls per 64 B message, receiver ($counter; target 0.2)" "calls" "$recv_calls" 0.2 lower
else
	echo "bench-compare: neither perf nor strace: no system call counts (apt-get install strace)" >&2
	failed=1
fi

echo
echo "bench-compare: rdma-container --transport tcp vs reference tools on 127.0.0.1, $(nproc) CPU(s), ${seconds} s runs, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
printf '%-50s %-7s %14s %14s %7s  %s\n' "case" "unit" "ours" "reference" "ratio" "(better)"
for r in "${rows[@]}"; do
	IFS='|' read -r name unit ours ref ratio better <<<"$r"
	printf '%-50s %-7s %14.2f %14.2f %7s  %s\n' "$name" "$unit" "${ours/FAILED/0}" "${ref/FAILED/0}" "$ratio" "$better"
done
if [ -n "$copy_cost" ]; then
	echo "the sender's copy alone (examples/copy_cost.rs, one core): $copy_cost"
else
	echo "bench-compare: examples/copy_cost.rs did not run (cargo build --release --example copy_cost)" >&2
	failed=1
fi
if [ -n "$json_out" ]; then
	for r in "${rows[@]}"; do
		IFS='|' read -r name unit ours ref ratio better <<<"$r"
		jq -n --arg case "$name" --arg unit "$unit" --arg ours "$ours" --arg ref "$ref" \
			--arg ratio "$ratio" --arg better "$better" \
			'{case: $case, unit: $unit, ours: $ours, reference: $ref, ratio: $ratio, better: $better}'
	done | jq -s . >"$json_out"
fi
if [ "$failed" -ne 0 ]; then
	echo "bench-compare: a run produced no number (logs: server and client stderr were in $work)" >&2
	for f in "$work"/*.log; do echo "--- $f"; tail -n 5 "$f"; done >&2
	exit 1
fi
