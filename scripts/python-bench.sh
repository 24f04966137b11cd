#!/usr/bin/env bash
# The Python module against `rdma-container bench` on the same transport (tcp on 127.0.0.1),
# in the same run: 64 B message rate and 64 KiB bandwidth, the same message counts and credits,
# sender and receiver pinned to different CPUs as scripts/bench-compare.sh does. Prints each
# pair, the ratio Python / Rust against its target (>= 0.80 at 64 B, >= 0.95 at 64 KiB) and what
# the Python layer costs per message (the difference of the per-message times).
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: scripts/python-bench.sh [--python PATH] [--binary PATH] [--count-64 N] [--count-64k N]

  --python PATH   interpreter with rdma_container installed
                  (default: target/python-test/venv/bin/python, made by scripts/python-test.sh)
  --binary PATH   rdma-container binary (default: target/release/rdma-container, built if missing)
  --count-64 N    64 B messages per run (default 1000000), credits 64
  --count-64k N   64 KiB messages per run (default 100000), credits 16
EOF
}

cd "$(dirname "$0")/.."
python=target/python-test/venv/bin/python
binary=""
count_small=1000000
count_large=100000
while [ $# -gt 0 ]; do
	case "$1" in
	--help | -h) usage; exit 0 ;;
	--python) python=$2; shift 2 ;;
	--binary) binary=$2; shift 2 ;;
	--count-64) count_small=$2; shift 2 ;;
	--count-64k) count_large=$2; shift 2 ;;
	*) echo "python-bench: unknown argument $1" >&2; usage >&2; exit 2 ;;
	esac
done
if [ -z "$binary" ]; then
	binary=${CARGO_TARGET_DIR:-target}/release/rdma-container
	[ -x "$binary" ] || cargo build --release --locked --quiet
fi
"$python" -c 'import rdma_container' || {
	echo "python-bench: $python cannot import rdma_container (run scripts/python-test.sh first)" >&2
	exit 1
}

if [ "$(nproc)" -ge 2 ]; then
	server_pin=(taskset -c 1)
	client_pin=(taskset -c 0)
else
	server_pin=()
	client_pin=()
fi
work=$(mktemp -d)
pids=()
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
port=$((20000 + RANDOM % 20000))

# cpu FILE CMD...: runs CMD and writes its CPU seconds (user + system) to FILE.
cpu() {
	"$python" -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[2:])
u = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(str(u.ru_utime + u.ru_stime))
sys.exit(r.returncode)' "$@"
}

json_field() { "$python" -c 'import json, sys; print(eval(sys.argv[1], {}, json.load(sys.stdin)))' "$1"; }

# rust SIZE COUNT CREDITS: prints "msg/s MiB/s"
rust() {
	port=$((port + 1))
	cpu "$work/cpu-rs" "${server_pin[@]}" "$binary" bench --server "127.0.0.1:$port" --once --transport tcp >"$work/rs.log" 2>&1 &
	pids+=($!)
	sleep 0.3
	cpu "$work/cpu-rc" "${client_pin[@]}" "$binary" bench --client "127.0.0.1:$port" --transport tcp \
		-s "$1" -n "$2" --credits "$3" --json 2>"$work/rc.log" |
		json_field 'str(results[0]["msg_rate_mpps"] * 1e6) + " " + str(results[0]["bw_average"])'
	wait "${pids[-1]}" 2>/dev/null || true
}

# python SIZE COUNT CREDITS: prints "msg/s MiB/s"
py() {
	port=$((port + 1))
	cpu "$work/cpu-ps" "${server_pin[@]}" "$python" python/benchmarks/pybench.py --server "127.0.0.1:$port" \
		--credits "$3" >"$work/ps.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do grep -q listening "$work/ps.log" 2>/dev/null && break; sleep 0.05; done
	cpu "$work/cpu-pc" "${client_pin[@]}" "$python" python/benchmarks/pybench.py --client "127.0.0.1:$port" \
		--size "$1" --count "$2" 2>"$work/pc.log" |
		json_field 'str(msg_per_s) + " " + str(mib_per_s)'
	wait "${pids[-1]}" 2>/dev/null || true
}

echo "python-bench: rdma_container (Python) vs rdma-container bench, tcp on 127.0.0.1, $(nproc) CPU(s), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
printf '%-26s %14s %14s %7s %8s %s\n' "" "rust bench" "python" "ratio" "target" "python layer's cost"
status=0
# measure NAME SIZE COUNT CREDITS FIELD(1: msg/s, 2: MiB/s) UNIT TARGET
measure() {
	local r p ratio cost holds r_rate r_bw p_rate p_bw shown_r shown_p
	r=$(rust "$2" "$3" "$4")
	p=$(py "$2" "$3" "$4")
	read -r r_rate r_bw <<<"$r"
	read -r p_rate p_bw <<<"$p"
	if [ -z "$r_bw" ] || [ -z "$p_bw" ]; then
		echo "python-bench: $1: a run produced no number (rust: '$r', python: '$p')" >&2
		status=1
		return
	fi
	if [ "$5" = 1 ]; then
		ratio=$(awk -v a="$p_rate" -v b="$r_rate" 'BEGIN { printf "%.2f", a / b }')
		printf -v shown_r '%.0f %s' "$r_rate" "$6"
		printf -v shown_p '%.0f %s' "$p_rate" "$6"
	else
		ratio=$(awk -v a="$p_bw" -v b="$r_bw" 'BEGIN { printf "%.2f", a / b }')
		printf -v shown_r '%.0f %s' "$r_bw" "$6"
		printf -v shown_p '%.0f %s' "$p_bw" "$6"
	fi
	# The Python layer's cost: CPU time per message, Python minus Rust, sender and receiver.
	cost=$(awk -v n="$3" -v pc="$(cat "$work/cpu-pc")" -v rc="$(cat "$work/cpu-rc")" \
		-v ps="$(cat "$work/cpu-ps")" -v rs="$(cat "$work/cpu-rs")" \
		'BEGIN { printf "send %+.2f us, recv %+.2f us (CPU/msg)", (pc - rc) * 1e6 / n, (ps - rs) * 1e6 / n }')
	holds=$(awk -v r="$ratio" -v t="$7" 'BEGIN { print (r >= t) ? "holds" : "MISSED" }')
	[ "$holds" = holds ] || status=1
	printf '%-26s %14s %14s %7s %8s %s\n' "$1" "$shown_r" "$shown_p" "$ratio" ">= $7 $holds" "$cost"
}
measure "64 B message rate" 64 "$count_small" 64 1 msg/s 0.80
measure "64 KiB bandwidth" 65536 "$count_large" 16 2 MiB/s 0.95
exit "$status"
