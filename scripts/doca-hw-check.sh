#!/usr/bin/env bash
# The kit for the first DOCA hardware run (docs/doca.md, "The first run on hardware").
#
# On a host with a ConnectX or BlueField and the DOCA SDK (3.1 is the target), in the container
# or on the host where rdma-container will run, as the user it will run as:
#
#     scripts/doca-hw-check.sh --device mlx5_0 --gid-index 3
#
# builds doca-sys's doca_hw_check example against the SDK, runs it and writes one JSON file
# (doca-hw-check-<host>-<time>.json, or --out FILE) with what the simulator can only guess:
# doca_ctx_start's code and the state after it, the export blob's size, doca_ctx_stop with and
# without a task allocated and the time to IDLE, the completion status and time until a killed
# peer process is detected, receive latency with the notification armed on every poll vs only
# before sleeping, the queue size caps, the memlock limit and CAP_IPC_LOCK, plus host facts.
# --sim runs it against the DOCA simulator instead (CI does, so the kit cannot rot).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: $0 [--device IBDEV] [--gid-index N] [--out FILE] [--sim]" >&2
  exit 2
}
device='' gid_index=0 out='' sim=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=${2:?}; shift 2 ;;
    --gid-index) gid_index=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --sim) sim=1; shift ;;
    -h|--help) usage ;;
    *) usage ;;
  esac
done
[ -n "$out" ] || out="doca-hw-check-$(hostname -s 2>/dev/null || echo host)-$(date -u +%Y%m%dT%H%M%SZ).json"

if [ "$sim" -eq 1 ]; then
  cargo build --locked --quiet -p doca-sys --features sim --example doca_hw_check
  probe=target/debug/examples/doca_hw_check
else
  cargo build --release --locked --quiet -p doca-sys --features require-doca --example doca_hw_check
  probe=target/release/examples/doca_hw_check
fi

args=(--gid-index "$gid_index")
[ -n "$device" ] && args+=(--device "$device")
status=0
result=$(timeout 300 "$probe" "${args[@]}") || status=$?
[ -n "$result" ] || result='{"error":"the probe printed nothing"}'

json_string() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
container=false
{ [ -f /.dockerenv ] || [ -f /run/.containerenv ]; } && container=true
{
  printf '{"kit_version":1,"probe_exit":%s,"simulator":%s,' "$status" "$([ "$sim" -eq 1 ] && echo true || echo false)"
  printf '"host":{"hostname":%s,"kernel":%s,"date_utc":%s,"container":%s,"ulimit_l":%s,"infiniband_nodes":%s},' \
    "$(json_string "$(hostname 2>/dev/null || true)")" \
    "$(json_string "$(uname -r)")" \
    "$(json_string "$(date -u +%Y-%m-%dT%H:%M:%SZ)")" \
    "$container" \
    "$(json_string "$(ulimit -l)")" \
    "$(json_string "$(find /dev/infiniband -mindepth 1 -maxdepth 1 -printf '%f ' 2>/dev/null || true)")"
  printf '"probe":%s}\n' "$result"
} > "$out"
python3 -m json.tool "$out" > /dev/null
echo "wrote $out (probe exit $status)"
[ "$sim" -eq 1 ] || echo "please attach $out to a new issue (rdma-container, title: DOCA hardware check) or send it to the maintainers"
exit "$status"
