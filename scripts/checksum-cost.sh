#!/usr/bin/env bash
# What --checksum crc32c (or, with --what resume, resumption: --resume-timeout 10, the senders
# keeping each message until released) costs: `bench --transport tcp` on loopback with it off
# and on, interleaved in the same run, at 64 B (message rate) and 64 KiB (bandwidth). Prints
# each run's figures and the ratio on / off (1.00 = free). The 64 KiB runs use 16 credits
# (bench's default) unless --bulk-credits says; the 64 B runs 64. The server runs on CPU 1 and
# the client on CPU 0 when the machine has two, as in scripts/bench-compare.sh. Usage:
#   scripts/checksum-cost.sh [--what checksum|resume] [--binary PATH] [--runs N] [--seconds S]
#                            [--bulk-credits N]
set -euo pipefail
binary="" runs=3 seconds=3 what=checksum bulk_credits=16
while [ $# -gt 0 ]; do
	case $1 in
	--what) what=$2; shift 2 ;;
	--binary) binary=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	--seconds) seconds=$2; shift 2 ;;
	--bulk-credits) bulk_credits=$2; shift 2 ;;
	-h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "unknown option $1 (see --help)" >&2; exit 64 ;;
	esac
done
cd "$(dirname "$0")/.."
if [ -z "$binary" ]; then
	cargo build --release --locked --quiet
	binary=target/release/rdma-container
fi
case $what in
checksum) off_args=(--checksum none) on_args=(--checksum crc32c) ;;
resume) off_args=(--resume-timeout 0) on_args=(--resume-timeout 10) ;;
*) echo "--what checksum or resume, not $what" >&2; exit 64 ;;
esac
command -v jq >/dev/null || { apt-get install -y -qq jq >/dev/null; }
server_pid=
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT
port=$((20000 + RANDOM % 20000))
server_pin=() client_pin=()
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
	server_pin=(taskset -c 1) client_pin=(taskset -c 0)
fi
# One figure: $1 = off|on, $2 = size; message rate (msg/s) at 64 B, MiB/s at 64 KiB. The
# bench server ends with its client's last size: one server per figure; it allows resumption,
# so the client's choice decides (the shorter timeout wins), as it adopts its checksum.
measure() {
	local field='.results[0].msg_rate_mpps * 1000000' credits=64
	[ "$2" -ge 65536 ] && field='.results[0].bw_average' && credits=$bulk_credits
	port=$((port + 1))
	"${server_pin[@]}" "$binary" bench --server "127.0.0.1:$port" --once --transport tcp --resume-timeout 10 >/dev/null 2>&1 &
	server_pid=$!
	sleep 0.3
	local args=("${off_args[@]}")
	[ "$1" = on ] && args=("${on_args[@]}")
	"${client_pin[@]}" "$binary" bench --client "127.0.0.1:$port" --transport tcp "${args[@]}" -s "$2" \
		-D "$seconds" --credits "$credits" --json 2>/dev/null | jq -r "$field"
	wait "$server_pid" 2>/dev/null || true
	server_pid=
}
printf '%-4s %-22s %14s %14s %8s\n' run case off on on/off
for run in $(seq 1 "$runs"); do
	for size in 64 65536; do
		off=$(measure off "$size")
		on=$(measure on "$size")
		case $size in 64) name="64 B rate (msg/s)" ;; *) name="64 KiB bw (MiB/s)" ;; esac
		printf '%-4s %-22s %14.0f %14.0f %8s\n' "$run" "$name" "$off" "$on" \
			"$(awk -v a="$on" -v b="$off" 'BEGIN { printf "%.2f", a / b }')"
	done
done
