#!/usr/bin/env bash
# bluefield-check.sh: the kit for a first run on a BlueField DPU's Arm cores (docs/bluefield.md).
#
# Copy the aarch64 binary (dist/aarch64/rdma-container from scripts/build-aarch64.sh) and this
# script to the DPU, then, as the user rdma-container will run as:
#
#     ./bluefield-check.sh --binary ./rdma-container --peer 192.168.100.1 [--probe IP:PORT]
#
# It prints, and writes to one report file (bluefield-check-<host>-<time>.txt, or --out FILE):
# the machine (architecture, OS, glibc, kernel), whether the binary runs here (--version), the
# DPU's mode as the kernel shows it (each RDMA device's netdev with its switchdev port name:
# p0/p1 uplinks, pf0hpf host PF representors, pf0vfN/pf0sfN representors, the SF netdevs), the
# eswitch mode (devlink), `doctor` and `doctor --peer IP` (which device, port and GID the route
# to the peer picks), and with --probe IP:PORT a real session with an `rdma-container --server`
# (or `bench --server`) there, on the device and GID chosen. Nothing is changed on the DPU.
# Exit status: 0 when the binary runs and (with --probe) the probe passed, 1 otherwise, 2 usage.
set -uo pipefail

usage() {
	sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
	echo "usage: $0 --binary PATH [--peer IP] [--probe IP:PORT] [--out FILE]"
}

binary='' peer='' probe='' out=''
while [ $# -gt 0 ]; do
	case "$1" in
	--binary) binary=${2:?--binary needs a path}; shift 2 ;;
	--peer) peer=${2:?--peer needs an address}; shift 2 ;;
	--probe) probe=${2:?--probe needs IP:PORT}; shift 2 ;;
	--out) out=${2:?--out needs a file}; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
[ -n "$binary" ] || { usage >&2; exit 2; }
[ -n "$out" ] || out="bluefield-check-$(hostname -s 2>/dev/null || echo dpu)-$(date -u +%Y%m%dT%H%M%SZ).txt"
status=0

section() { printf '\n== %s\n' "$*"; }

{
	section "machine"
	echo "architecture: $(uname -m) (BlueField's Arm cores: aarch64)"
	# shellcheck disable=SC1091 # the DPU's own file
	(. /etc/os-release 2>/dev/null && echo "OS: ${PRETTY_NAME:-unknown}")
	echo "glibc: $(ldd --version 2>/dev/null | head -n 1)"
	echo "kernel: $(uname -r)"
	[ -r /proc/device-tree/model ] && echo "model: $(tr -d '\0' </proc/device-tree/model)"

	section "the binary"
	if ! "$binary" --version; then
		echo "FAILED: $binary does not run here"
		status=1
	fi

	section "RDMA devices and their netdevs (switchdev port names)"
	for dev in /sys/class/infiniband/*; do
		[ -e "$dev" ] || { echo "no RDMA devices under /sys/class/infiniband"; break; }
		for nd in "$dev"/device/net/*; do
			[ -e "$nd" ] || continue
			name=${nd##*/}
			port=$(cat "/sys/class/net/$name/phys_port_name" 2>/dev/null || echo -)
			addrs=$(ip -br -4 addr show dev "$name" 2>/dev/null | awk '{ $1 = ""; $2 = ""; print }')
			echo "${dev##*/}: netdev $name, port name $port, state $(cat "/sys/class/net/$name/operstate" 2>/dev/null), IPv4:${addrs:- none}"
		done
	done

	section "eswitch mode (switchdev: DPU mode, the Arm owns the uplinks)"
	if command -v devlink >/dev/null; then
		devlink dev eswitch show 2>&1 || true
	else
		echo "devlink not installed (iproute2)"
	fi

	section "memlock and CAP_IPC_LOCK"
	echo "memlock: $(ulimit -l) KiB"
	grep CapEff /proc/self/status

	section "doctor"
	"$binary" doctor || status=1
	if [ -n "$peer" ]; then
		section "doctor --peer $peer"
		"$binary" doctor --peer "$peer" || status=1
	fi
	if [ -n "$probe" ]; then
		section "doctor --probe $probe"
		"$binary" doctor --probe "$probe" || status=1
	fi
	section "verdict"
	if [ "$status" = 0 ]; then echo "PASS"; else echo "FAIL (above)"; fi
	exit "$status"
} 2>&1 | tee "$out"
verdict=${PIPESTATUS[0]}
echo "report: $out" >&2
exit "$verdict"
