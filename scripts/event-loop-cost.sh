#!/usr/bin/env bash
# event-loop-cost.sh: what the library's event-loop calls cost next to its blocking ones, in the
# same run: examples/event_loop_cost.rs at 64 B and 64 KiB, each way (blocking send/recv,
# try_send/try_recv with poll(2) on the readiness descriptor, tokio's AsyncRdmaSink/Src)
# alternated over --rounds rounds, the median of each and its ratio to blocking.
set -euo pipefail

usage() {
	cat <<'USAGE'
Usage: scripts/event-loop-cost.sh [--addr IP] [--transport tcp|verbs|doca] [--rounds N]

Runs `cargo build --release --example event_loop_cost`, then the example at 64 B and 64 KiB
(both ends in this process; default 127.0.0.1 over tcp; --addr an RDMA device's address with
--transport verbs on a host with one). Prints one EVENT-LOOP-COST line per size: messages per
second of each way and, in parentheses, its ratio to the blocking calls of the same run
(the target: 0.90 or more). `scripts/softroce-vm.sh --checks event-loop-cost` runs the same example over verbs.

Exit status: 0 when every way ran and delivered every message, 1 when one failed, 2 for a bad
option.
USAGE
}

addr=127.0.0.1 transport=tcp rounds=3
while [ $# -gt 0 ]; do
	case "$1" in
	--addr) addr=$2; shift 2 ;;
	--transport) transport=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "event-loop-cost: unknown option $1 (see --help)" >&2; exit 2 ;;
	esac
done
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet --example event_loop_cost
exe=${CARGO_TARGET_DIR:-target}/release/examples/event_loop_cost
"$exe" --addr "$addr" --transport "$transport" --size 64 --count 200000 --credits 16 --rounds "$rounds"
"$exe" --addr "$addr" --transport "$transport" --size 65536 --count 20000 --credits 16 --rounds "$rounds"
