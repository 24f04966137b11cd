#!/usr/bin/env bash
# Idempotent soft-RoCE (rdma_rxe) bring-up on a host without RDMA hardware. See --help.
set -euo pipefail

me=setup-soft-roce
SYSFS_ROOT=${RDMA_CONTAINER_SYSFS_ROOT:-/sys}
MODULES_ROOT=${RDMA_CONTAINER_MODULES_ROOT:-/}

usage() {
	cat <<'EOF'
Usage: setup-soft-roce.sh [--dry-run] [--name NAME] [IFACE]

Brings up soft-RoCE (the kernel's rdma_rxe driver) on IFACE so that RDMA programs, rdma-container
included, can run on a host without an RDMA NIC. IFACE defaults to the interface of the IPv4
default route. Safe to run again: when IFACE already has an RDMA device (soft-RoCE or a real
RoCE NIC) it changes nothing.

Steps (each checked before anything is changed):
  1. the kernel has rdma_rxe (loaded, built in, or a module modinfo finds);
  2. IFACE exists (and is not lo), and whether it already has an RDMA device;
  3. modprobe rdma_rxe, ib_uverbs and rdma_ucm (the last two give /dev/infiniband/uverbsN and
     /dev/infiniband/rdma_cm);
  4. rdma link add NAME type rxe netdev IFACE, then waits for the device to appear.
Steps 3 and 4 need root; without root the script stops before step 1.

Options:
  -n, --dry-run   run the checks and print the commands instead of running them (no root needed)
  --name NAME     name of the new RDMA device (default rxe0)
  -h, --help      this text

Environment (for tests; changes are refused unless they are the defaults, use --dry-run):
  RDMA_CONTAINER_SYSFS_ROOT    read module/, class/net/, class/infiniband/ here (default /sys)
  RDMA_CONTAINER_MODULES_ROOT  look for lib/modules/$(uname -r) here (default /)

Exit status: 0 soft-RoCE is up on IFACE (or already was, or --dry-run found nothing wrong);
1 a check or a step failed; 2 usage error; 3 this kernel has no rdma_rxe (nothing can be done
here: see the message).

Notes: the device does not survive a reboot (run the script again, e.g. from a systemd unit).
Containers share the host's kernel: run this on the host, not in a container. After it,
`rdma-container doctor --peer PEER_IP` shows the device and GID a session would use, and
scripts/check-rdma-readiness.sh gives the full report.
EOF
}

info() { printf '%s: %s\n' "$me" "$*"; }
die() {
	printf '%s: error: %s\n' "$me" "$1" >&2
	exit "${2:-1}"
}
usage_error() {
	printf '%s: %s (see --help)\n' "$me" "$1" >&2
	exit 2
}

dry_run=0
name=rxe0
iface=
while [ $# -gt 0 ]; do
	case "$1" in
	-h | --help)
		usage
		exit 0
		;;
	-n | --dry-run) dry_run=1 ;;
	--name)
		[ $# -ge 2 ] || usage_error "--name needs a value"
		name=$2
		shift
		;;
	--name=*) name=${1#--name=} ;;
	-*) usage_error "unknown option $1" ;;
	*)
		[ -z "$iface" ] || usage_error "only one IFACE may be given"
		iface=$1
		;;
	esac
	shift
done
case "$name" in
'' | *[!A-Za-z0-9_-]*) usage_error "--name must be letters, digits, _ or - (got '$name')" ;;
esac

# Changes need root and the real system; check both before looking at anything.
if [ "$dry_run" = 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		die "loading modules and 'rdma link add' need root: run it with sudo (or use --dry-run to only check)"
	fi
	if [ "$SYSFS_ROOT" != /sys ] || [ "$MODULES_ROOT" != / ]; then
		die "RDMA_CONTAINER_SYSFS_ROOT/RDMA_CONTAINER_MODULES_ROOT point at a test tree: only --dry-run may be used with them"
	fi
fi

run() {
	if [ "$dry_run" = 1 ]; then
		info "would run: $*"
	else
		info "running: $*"
		"$@"
	fi
}

# ---- 1. rdma_rxe in this kernel
krel=$(uname -r)
moddir="${MODULES_ROOT%/}/lib/modules/$krel"
have_module() { # NAME: loaded or built in
	[ -d "$SYSFS_ROOT/module/$1" ] ||
		{ [ -r "$moddir/modules.builtin" ] && grep -q "/$1\.ko\$" "$moddir/modules.builtin"; }
}
loadable() { # NAME: a module modinfo finds for this kernel
	command -v modinfo >/dev/null 2>&1 &&
		modinfo -b "$MODULES_ROOT" -k "$krel" "$1" >/dev/null 2>&1
}
load_rxe=0
if have_module rdma_rxe; then
	info "rdma_rxe: loaded or built into kernel $krel"
elif loadable rdma_rxe; then
	info "rdma_rxe: available as a module for kernel $krel"
	load_rxe=1
else
	why="it is not loaded ($SYSFS_ROOT/module/rdma_rxe is absent), not built in, and"
	if [ -d "$moddir" ]; then
		why="$why modinfo finds no rdma_rxe module under $moddir"
	else
		why="$why there is no module directory $moddir at all"
	fi
	die "this kernel ($krel) lacks rdma_rxe, the soft-RoCE driver: $why.
  Fix: use a kernel built with CONFIG_RDMA_RXE=m (Debian's and Fedora's stock kernels have it;
  on Ubuntu: apt-get install linux-modules-extra-$krel), then run this again.
  In a container or VM: soft-RoCE must be set up by the kernel that runs it (the host's, for a
  container). Without RDMA, rdma-container still works with --transport tcp." 3
fi

# ---- 2. the interface
if [ -z "$iface" ]; then
	command -v ip >/dev/null 2>&1 || die "no IFACE given and 'ip' (iproute2) is missing to find the default route: pass IFACE, or apt-get install iproute2"
	iface=$(ip -4 route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}')
	[ -n "$iface" ] || die "no IFACE given and there is no IPv4 default route to take it from: pass the interface that carries your RoCE address, e.g. $me eth0"
	info "interface: $iface (from the default route)"
fi
if [ ! -e "$SYSFS_ROOT/class/net/$iface" ]; then
	die "there is no network interface '$iface' in this network namespace ($SYSFS_ROOT/class/net/$iface is absent): 'ip -br link' lists them"
fi
if [ "$iface" = lo ]; then
	die "soft-RoCE cannot run on the loopback interface: use a real or dummy interface (ip link add rxe-dummy type dummy; ip addr add 198.18.0.1/24 dev rxe-dummy; ip link set rxe-dummy up)"
fi
operstate=$(cat "$SYSFS_ROOT/class/net/$iface/operstate" 2>/dev/null || echo unknown)
case "$operstate" in
up | unknown) ;;
*) info "warning: $iface is $operstate; the RDMA port is ACTIVE only while the interface is up (ip link set $iface up)" ;;
esac

# An RDMA device already on IFACE? Its GIDs name IFACE as their netdev (sysfs), or `rdma link`
# says so (also right after creation, before any GID is populated).
existing=
for f in "$SYSFS_ROOT"/class/infiniband/*/ports/*/gid_attrs/ndevs/*; do
	[ -e "$f" ] || continue
	if [ "$(cat "$f" 2>/dev/null || true)" = "$iface" ]; then
		existing=${f#"$SYSFS_ROOT"/class/infiniband/}
		existing=${existing%%/*}
		break
	fi
done
if [ -z "$existing" ] && [ "$SYSFS_ROOT" = /sys ] && command -v rdma >/dev/null 2>&1; then
	existing=$(rdma link show 2>/dev/null | awk -v want="$iface" '{for (i = 1; i < NF; i++) if ($i == "netdev" && $(i + 1) == want) {split($2, a, "/"); print a[1]; exit}}')
fi
if [ -n "$existing" ]; then
	info "$iface already has the RDMA device $existing: nothing to do"
	info "next: rdma-container doctor --peer PEER_IP (or scripts/check-rdma-readiness.sh)"
	exit 0
fi
if [ -e "$SYSFS_ROOT/class/infiniband/$name" ]; then
	die "an RDMA device named $name already exists on another interface: pass --name, e.g. --name rxe_$iface"
fi

# ---- 3 and 4: the changes
command -v rdma >/dev/null 2>&1 || die "the 'rdma' tool (iproute2) is missing: apt-get install iproute2"
if [ "$load_rxe" = 1 ] || ! have_module ib_uverbs || ! have_module rdma_ucm; then
	command -v modprobe >/dev/null 2>&1 || die "modprobe is missing: apt-get install kmod"
fi
if [ "$load_rxe" = 1 ]; then
	run modprobe rdma_rxe
fi
for m in ib_uverbs rdma_ucm; do
	if ! have_module "$m"; then
		if loadable "$m"; then
			run modprobe "$m"
		else
			info "warning: no $m module for kernel $krel: /dev/infiniband/$([ "$m" = ib_uverbs ] && echo uverbsN || echo rdma_cm) will be missing"
		fi
	fi
done
run rdma link add "$name" type rxe netdev "$iface"
if [ "$dry_run" = 1 ]; then
	info "dry run: nothing was changed"
	exit 0
fi

for _ in $(seq 50); do
	[ -e "$SYSFS_ROOT/class/infiniband/$name" ] && break
	sleep 0.1
done
[ -e "$SYSFS_ROOT/class/infiniband/$name" ] ||
	die "'rdma link add' returned but $SYSFS_ROOT/class/infiniband/$name did not appear within 5 s (see dmesg)"
rdma link show "$name/1" || true
gids=0
for g in "$SYSFS_ROOT/class/infiniband/$name"/ports/1/gids/*; do
	[ -r "$g" ] || continue
	case "$(cat "$g" 2>/dev/null || true)" in
	0000:0000:0000:0000:0000:ffff:*) gids=$((gids + 1)) ;;
	esac
done
if [ "$gids" = 0 ]; then
	info "warning: $name has no IPv4 GID yet: give $iface an IPv4 address (ip addr add ADDR/LEN dev $iface) and it appears"
fi
info "soft-RoCE is up: $name on $iface"
info "next: rdma-container doctor --peer PEER_IP (or scripts/check-rdma-readiness.sh)"
