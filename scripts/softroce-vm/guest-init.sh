#!/bin/bash
# PID 1 of the softroce-vm guest (see scripts/softroce-vm.sh). Runs from the initramfs; the VM
# has no NIC (qemu -nic none), so every packet stays inside it.
#
# Loads the RDMA modules, builds the test network, runs the checks from
# /etc/softroce-vm/checks.sh selected in /etc/softroce-vm/config and powers off:
#
#   nsA (client side)                         nsB (server side)
#   vA 198.18.1.1/24  <------ veth ------>    vB 198.18.1.2/24
#   rxeA (rdma_rxe on vA)                     rxeB (rdma_rxe on vB)
#
# 198.18.0.0/15 is the benchmarking range; nothing here routes anywhere else.
export PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
umask 022

# ---- settings (the host's config file overrides them)
TRANSPORT=verbs
CHECKS="messages peer-lost doctor baseline"
SUITE_TESTS=""
TRANSPORT_TEST=""
SHELL_AT_END=0
NS_A=nsA NS_B=nsB
IP_A=198.18.1.1 IP_B=198.18.1.2
RXE_A=rxeA RXE_B=rxeB
# shellcheck source=/dev/null
[ -f /etc/softroce-vm/config ] && . /etc/softroce-vm/config

# Seconds since boot.
uptime_s() { cut -d' ' -f1 /proc/uptime; }
say() { echo "[softroce-vm $(uptime_s)s] $*"; }

PASSED=0 FAILED=0 SKIPPED=0
PLAN=""          # every result name this boot will report (SOFTROCE-PLAN)
declare -A REPORTED=()
# One machine-readable line per check: SOFTROCE-TEST <name> PASS|FAIL|SKIP [detail].
result() { # name status [detail...]
	local name=$1 status=$2
	shift 2
	REPORTED[$name]=$status
	echo "SOFTROCE-TEST $name $status${*:+ $*}"
	case "$status" in
	PASS) PASSED=$((PASSED + 1)) ;;
	SKIP) SKIPPED=$((SKIPPED + 1)) ;;
	*) FAILED=$((FAILED + 1)) ;;
	esac
	return 0
}

# Prints the final line, optionally opens a shell, powers off. Never returns.
finish() {
	local verdict=PASS name
	for name in $PLAN; do
		[ -n "${REPORTED[$name]:-}" ] || result "$name" FAIL "not run: an earlier step failed"
	done
	[ "$FAILED" = 0 ] && [ "$PASSED" -gt 0 ] || verdict=FAIL
	echo "SOFTROCE-RESULT $verdict ($PASSED passed, $FAILED failed, $SKIPPED skipped; guest uptime $(uptime_s)s)"
	if [ "$SHELL_AT_END" = 1 ]; then
		echo "guest shell: NS_A=$NS_A NS_B=$NS_B IP_A=$IP_A IP_B=$IP_B; exit to power off"
		setsid cttyhack bash -l
	fi
	sync
	poweroff -f
	sleep 5
	echo o >/proc/sysrq-trigger
}

mount_filesystems() {
	mount -t proc proc /proc
	mount -t sysfs sysfs /sys
	mount -t devtmpfs devtmpfs /dev
	mkdir -p /dev/pts /dev/shm
	mount -t devpts devpts /dev/pts
	mount -t tmpfs tmpfs /dev/shm
	mount -t tmpfs tmpfs /run
	# A clone under /tmp puts its test executables there: a tmpfs would hide them (the
	# initramfs root is writable memory already).
	[ -n "$(ls -A /tmp 2>/dev/null)" ] || mount -t tmpfs tmpfs /tmp
	mkdir -p /run/netns
	# devtmpfs has no /dev/fd (bash process substitution needs it)
	ln -s /proc/self/fd /dev/fd
	ln -s /proc/self/fd/0 /dev/stdin
	ln -s /proc/self/fd/1 /dev/stdout
	ln -s /proc/self/fd/2 /dev/stderr
}

# modules.order was computed on the host: dependencies first, names of decompressed .ko files.
load_modules() {
	local dir m
	dir=/lib/modules/$(uname -r)
	while read -r m; do
		insmod "$dir/$m" 2>/tmp/insmod.err || grep -q 'File exists' /tmp/insmod.err ||
			echo "insmod $m: $(cat /tmp/insmod.err)"
	done <"$dir/modules.order"
}

# The two namespaces, the veth pair and one rxe device on each end.
setup_network() {
	ip link set lo up &&
		ip netns add "$NS_A" && ip netns add "$NS_B" &&
		ip link add vA type veth peer name vB &&
		ip link set vA netns "$NS_A" && ip link set vB netns "$NS_B" &&
		ip -n "$NS_A" link set lo up && ip -n "$NS_B" link set lo up &&
		ip -n "$NS_A" addr add "$IP_A/24" dev vA && ip -n "$NS_B" addr add "$IP_B/24" dev vB &&
		ip -n "$NS_A" link set vA up && ip -n "$NS_B" link set vB up &&
		ip netns exec "$NS_A" rdma link add "$RXE_A" type rxe netdev vA &&
		ip netns exec "$NS_B" rdma link add "$RXE_B" type rxe netdev vB
}

main() {
	mount_filesystems
	say "init started: Linux $(uname -r), transport $TRANSPORT, checks: $CHECKS"
	# shellcheck source=scripts/softroce-vm/guest-checks.sh
	. /etc/softroce-vm/checks.sh
	# shellcheck source=scripts/softroce-vm/guest-container.sh
	. /etc/softroce-vm/container.sh
	local c
	PLAN=setup
	for c in $CHECKS; do PLAN="$PLAN ${CHECK_RESULTS[$c]:-$c}"; done
	echo "SOFTROCE-PLAN $PLAN"

	load_modules
	say "modules: $(cut -d' ' -f1 /proc/modules | tr '\n' ' ')"
	if ! setup_network; then
		result setup FAIL "could not create the namespaces, veth pair and rxe devices"
		finish
	fi
	if ! check_setup; then finish; fi

	for c in $CHECKS; do
		say "---- check: $c"
		case "$c" in
		messages) check_messages ;;
		peer-lost) check_peer_lost ;;
		link-flap) check_link_flap ;;
		paths) check_paths ;;
		doctor) check_doctor ;;
		baseline) check_baseline ;;
		event-loop-cost) check_event_loop_cost ;;
		lat-profile) check_lat_profile ;;
		lat-perf) check_lat_perf ;;
		lat-trace) check_lat_trace ;;
		lat-syscalls) check_lat_syscalls ;;
		qp-pingpong) check_qp_pingpong ;;
		container) check_container; check_container_kube ;;
		rnr) check_rnr ;;
		suite) check_suite ;;
		transport) check_transport ;;
		*) result "$c" FAIL "unknown check" ;;
		esac
	done
	say "---- done"
	dmesg | grep -iE 'rxe|rdma|infiniband|warn|bug|oops' | tail -n 20 | sed 's/^/dmesg: /'
	finish
}

main
