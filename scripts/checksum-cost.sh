#!/usr/bin/env bash
# What --checksum crc32c costs: `bench --transport tcp` on loopback with the check off and on,
# interleaved in the same run, at 64 B (message rate) and 64 KiB (bandwidth). Prints each
# run's figures and the ratio on / off (1.00 = free). Usage:
#   scripts/checksum-cost.sh [--binary PATH] [--runs N] [--seconds S]
set -euo pipefail
binary="" runs=3 seconds=3
while [ $# -gt 0 ]; do
	case $1 in
	--binary) binary=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	--seconds) seconds=$2; shift 2 ;;
	-h | --help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "unknown option $1 (see --help)" >&2; exit 64 ;;
	esac
done
cd "$(dirname "$0")/.."
if [ -z "$binary" ]; then
	cargo build --release --locked --quiet
	binary=target/release/rdma-container
fi
command -v jq >/dev/null || { apt-get install -y -qq jq >/dev/null; }
server_pid=
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT
port=$((20000 + RANDOM % 20000))
# One figure: $1 = none|crc32c, $2 = size; message rate (msg/s) at 64 B, MiB/s at 64 KiB. The
# bench server ends with its client's last size: one server per figure.
measure() {
	local field='.results[0].msg_rate_mpps * 1000000' credits=64
	[ "$2" -ge 65536 ] && field='.results[0].bw_average' && credits=16
	port=$((port + 1))
	"$binary" bench --server "127.0.0.1:$port" --transport tcp >/dev/null 2>&1 &
	server_pid=$!
	sleep 0.3
	"$binary" bench --client "127.0.0.1:$port" --transport tcp --checksum "$1" -s "$2" \
		-D "$seconds" --credits "$credits" --json 2>/dev/null | jq -r "$field"
	wait "$server_pid" 2>/dev/null || true
	server_pid=
}
printf '%-4s %-22s %14s %14s %8s\n' run case off on on/off
for run in $(seq 1 "$runs"); do
	for size in 64 65536; do
		off=$(measure none "$size")
		on=$(measure crc32c "$size")
		case $size in 64) name="64 B rate (msg/s)" ;; *) name="64 KiB bw (MiB/s)" ;; esac
		printf '%-4s %-22s %14.0f %14.0f %8s\n' "$run" "$name" "$off" "$on" \
			"$(awk -v a="$on" -v b="$off" 'BEGIN { printf "%.2f", a / b }')"
	done
done
