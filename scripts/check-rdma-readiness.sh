#!/usr/bin/env bash
# RDMA readiness report for a host or a container. Changes nothing. See --help.
set -euo pipefail

me=check-rdma-readiness
SYSFS_ROOT=${RDMA_CONTAINER_SYSFS_ROOT:-/sys}
DEV_ROOT=${RDMA_CONTAINER_DEV_ROOT:-/dev}
PROC_ROOT=${RDMA_CONTAINER_PROC_ROOT:-/proc}
DOCA_DIR=${DOCA_ROOT:-/opt/mellanox/doca}
# Same threshold as `rdma-container doctor`: 64 MiB of locked memory without CAP_IPC_LOCK.
MEMLOCK_NEEDED_KB=65536

usage() {
	cat <<'EOF'
Usage: check-rdma-readiness.sh [--peer IP | --local-ip IP]

Reports whether this host or container can run rdma-container over RDMA (RoCE v2), and for each
failure says why and what fixes it. Changes nothing; no root needed.

Checks: kernel modules (ib_core, ib_uverbs, rdma_ucm, mlx5_ib or rdma_rxe), RDMA devices, port
states and link layers, RoCE v2 GIDs with an IPv4 address, /dev/infiniband device nodes (and
which uverbsN is which device), memlock limit and CAP_IPC_LOCK, the DOCA install, and the
rdma-container binary itself: it runs `rdma-container --version` and `rdma-container doctor`
(with --peer/--local-ip, the device and GID a session would use; no choice is a failure).

Options:
  --peer IP      also check the device choice for a session with this peer
  --local-ip IP  also check the device choice for this local (RoCE) address
  -h, --help     this text

Environment:
  RDMA_CONTAINER_BIN         the binary (default: rdma-container on PATH)
  RDMA_CONTAINER_SYSFS_ROOT  sysfs to read (default /sys; passed to doctor as --sysfs-root)
  RDMA_CONTAINER_DEV_ROOT    where infiniband/ is looked for (default /dev)
  RDMA_CONTAINER_PROC_ROOT   where self/status and self/limits are read (default /proc)
  DOCA_ROOT                  the DOCA install (default /opt/mellanox/doca)

Output: one line per check, [ OK ], [WARN] or [FAIL], each [FAIL] followed by a "fix:" line.
Exit status: 0 ready (warnings allowed), 1 not ready (at least one [FAIL]), 2 usage error.
EOF
}

usage_error() {
	printf '%s: %s (see --help)\n' "$me" "$1" >&2
	exit 2
}

peer_flag=
peer=
while [ $# -gt 0 ]; do
	case "$1" in
	-h | --help)
		usage
		exit 0
		;;
	--peer | --local-ip)
		[ $# -ge 2 ] || usage_error "$1 needs an IPv4 address"
		[ -z "$peer_flag" ] || usage_error "give --peer or --local-ip once"
		peer_flag=$1
		peer=$2
		shift
		;;
	*) usage_error "unknown argument $1" ;;
	esac
	shift
done

fails=0
warns=0
ok() { printf '[ OK ] %s\n' "$*"; }
warn() {
	warns=$((warns + 1))
	printf '[WARN] %s\n' "$*"
}
fail() { # WHAT FIX
	fails=$((fails + 1))
	printf '[FAIL] %s\n' "$1"
	printf '       fix: %s\n' "$2"
}
section() { printf '\n== %s\n' "$*"; }
first_line() { # FILE: its first line, or nothing when unreadable
	local line=
	{ IFS= read -r line || true; } <"$1" 2>/dev/null || return 0
	printf '%s' "$line"
}
in_container() {
	[ -e /.dockerenv ] || [ -e /run/.containerenv ] ||
		grep -qsE '/(docker|containerd|kubepods|libpod)' "$PROC_ROOT/1/cgroup"
}
if in_container; then where=container; else where=host; fi
printf 'rdma-container readiness report (%s; sysfs %s, dev %s, proc %s)\n' "$where" "$SYSFS_ROOT" "$DEV_ROOT" "$PROC_ROOT"

# ---- kernel modules (a module built into the kernel may not show up here: devices decide)
section "kernel modules"
loaded=
for m in ib_core ib_uverbs rdma_ucm rdma_cm mlx5_core mlx5_ib rdma_rxe; do
	if [ -d "$SYSFS_ROOT/module/$m" ]; then loaded="$loaded $m"; fi
done
if [ -n "$loaded" ]; then
	ok "loaded:$loaded"
else
	warn "none of ib_core, ib_uverbs, rdma_ucm, mlx5_ib, rdma_rxe shows under $SYSFS_ROOT/module (built in, or no RDMA stack)"
fi
case " $loaded " in
*" mlx5_ib "* | *" rdma_rxe "* | "  ") ;;
*) warn "no RDMA driver module (mlx5_ib for ConnectX/BlueField, rdma_rxe for soft-RoCE) is loaded" ;;
esac

# ---- devices, ports, GIDs
section "RDMA devices, ports and GIDs ($SYSFS_ROOT/class/infiniband)"
devices=()
for d in "$SYSFS_ROOT"/class/infiniband/*; do
	if [ -d "$d" ]; then devices+=("${d##*/}"); fi
done
v2_gids=0
foreign=0
if [ "${#devices[@]}" -eq 0 ]; then
	fail "no RDMA devices" \
		"on a host: load the NIC's RDMA driver (modprobe mlx5_ib) or set up soft-RoCE (scripts/setup-soft-roce.sh IFACE); a container sees the host's devices, so fix it on the host. Until then only --transport tcp works"
else
	active=0
	for dev in "${devices[@]}"; do
		for p in "$SYSFS_ROOT/class/infiniband/$dev"/ports/*; do
			[ -d "$p" ] || continue
			port=${p##*/}
			state=$(first_line "$p/state")
			layer=$(first_line "$p/link_layer")
			case "$state" in
			*ACTIVE*)
				active=$((active + 1))
				ok "$dev port $port: ${state:-?}, link layer ${layer:-?}"
				;;
			*) warn "$dev port $port: ${state:-state unreadable}, link layer ${layer:-?} (not ACTIVE: unusable until its interface has link)" ;;
			esac
			if [ "$layer" = InfiniBand ]; then
				warn "$dev port $port is InfiniBand, not Ethernet: rdma-container speaks RoCE (RDMA over Ethernet)"
			fi
			for g in "$p"/gids/*; do
				[ -e "$g" ] || continue
				i=${g##*/}
				gid=$(first_line "$g")
				case "$gid" in
				0000:0000:0000:0000:0000:ffff:*) ;;
				*) continue ;;
				esac
				if [ ! -r "$p/gid_attrs/types/$i" ] || [ -z "$(first_line "$p/gid_attrs/types/$i")" ]; then
					foreign=$((foreign + 1))
					continue
				fi
				gtype=$(first_line "$p/gid_attrs/types/$i")
				ndev=$(first_line "$p/gid_attrs/ndevs/$i")
				hex=${gid#0000:0000:0000:0000:0000:ffff:}
				hex=${hex//:/}
				ip=$((16#${hex:0:2})).$((16#${hex:2:2})).$((16#${hex:4:2})).$((16#${hex:6:2}))
				if [ "$gtype" = "RoCE v2" ] && [[ "$state" == *ACTIVE* ]]; then
					v2_gids=$((v2_gids + 1))
					ok "RoCE v2 GID: $dev port $port index $i = $ip (${ndev:-no netdev})"
				fi
			done
		done
	done
	if [ "$active" -eq 0 ]; then
		fail "no RDMA port is ACTIVE" \
			"bring the RoCE interface up and check the cable/link (ip link set IFACE up; ip -br link); rdma link show lists the ports"
	fi
	if [ "$foreign" -gt 0 ]; then
		warn "$foreign IPv4 GID(s) belong to another network namespace (attributes unreadable): in a container run with --network host"
	fi
	if [ "$v2_gids" -eq 0 ]; then
		if [ "$foreign" -gt 0 ]; then
			fail "no RoCE v2 GID with an IPv4 address in this network namespace" \
				"run the container with --network host (the GIDs belong to the host's interfaces)"
		else
			fail "no RoCE v2 GID with an IPv4 address on an ACTIVE port" \
				"give the RoCE interface an IPv4 address (ip addr add ADDR/LEN dev IFACE) and bring it up; its RoCE v2 GID appears by itself"
		fi
	fi
fi

# ---- device nodes
section "device nodes ($DEV_ROOT/infiniband)"
have_nodes=()
for n in "$DEV_ROOT"/infiniband/uverbs*; do
	if [ -e "$n" ]; then have_nodes+=("${n##*/}"); fi
done
map=
flags=
for v in "$SYSFS_ROOT"/class/infiniband_verbs/uverbs*; do
	[ -d "$v" ] || continue
	map="$map ${v##*/}=$(first_line "$v/ibdev")"
	flags="$flags --device /dev/infiniband/${v##*/}"
done
if [ -n "$map" ]; then
	ok "uverbsN belongs to (from class/infiniband_verbs/uverbsN/ibdev):$map"
fi
if [ "$where" = container ]; then
	uverbs_fix="run the container with${flags:- --device /dev/infiniband/uverbs0} (the one(s) of the device your RoCE address is on; see the map above)"
	cm_fix="run the container with --device /dev/infiniband/rdma_cm"
else
	uverbs_fix="modprobe ib_uverbs (it creates /dev/infiniband/uverbsN for each RDMA device)"
	cm_fix="modprobe rdma_ucm"
fi
if [ "${#have_nodes[@]}" -eq 0 ]; then
	fail "no $DEV_ROOT/infiniband/uverbsN device node: RDMA programs cannot open a device" "$uverbs_fix"
else
	ok "present: ${have_nodes[*]}"
	for v in "$SYSFS_ROOT"/class/infiniband_verbs/uverbs*; do
		[ -d "$v" ] || continue
		case " ${have_nodes[*]} " in
		*" ${v##*/} "*) ;;
		*) warn "${v##*/} ($(first_line "$v/ibdev")) has no device node here: needed only if your RoCE address is on that device" ;;
		esac
	done
fi
if [ -e "$DEV_ROOT/infiniband/rdma_cm" ]; then
	ok "present: rdma_cm"
else
	warn "no $DEV_ROOT/infiniband/rdma_cm (needed for connection setup through rdma_cm): $cm_fix"
fi

# ---- locked memory
section "locked memory"
cap_eff=
uid=
if [ -r "$PROC_ROOT/self/status" ]; then
	while read -r key value _rest; do
		case "$key" in
		CapEff:) cap_eff=$value ;;
		Uid:) uid=$value ;;
		esac
	done <"$PROC_ROOT/self/status"
fi
has_cap=unknown
if [[ "$cap_eff" =~ ^[0-9a-fA-F]+$ ]]; then
	low=${cap_eff: -4}
	if (((16#$low >> 14) & 1)); then has_cap=yes; else has_cap=no; fi
fi
memlock=unknown
if [ -r "$PROC_ROOT/self/limits" ]; then
	while read -r w1 w2 w3 soft _rest; do
		if [ "$w1 $w2 $w3" = "Max locked memory" ]; then
			if [ "$soft" = unlimited ]; then
				memlock=unlimited
			elif [[ "$soft" =~ ^[0-9]+$ ]]; then
				memlock=$((soft / 1024))
			fi
		fi
	done <"$PROC_ROOT/self/limits"
fi
shown=$memlock
if [[ "$memlock" =~ ^[0-9]+$ ]]; then shown="$memlock KiB"; fi
if [ "$memlock" = unlimited ] || { [[ "$memlock" =~ ^[0-9]+$ ]] && [ "$memlock" -ge "$MEMLOCK_NEEDED_KB" ]; }; then
	ok "memlock limit: $shown (CAP_IPC_LOCK: $has_cap)"
elif [ "$has_cap" = yes ]; then
	ok "CAP_IPC_LOCK is in effect, so the memlock limit ($shown) does not apply"
else
	if [ "$where" = container ]; then
		fix="run the container with --cap-add=IPC_LOCK (as root in the container) or --ulimit memlock=-1"
	else
		fix="raise the limit: ulimit -l unlimited in the shell that starts rdma-container, or a memlock line in /etc/security/limits.conf, or LimitMEMLOCK=infinity in its systemd unit"
	fi
	if [ -n "$uid" ] && [ "$uid" != 0 ] && [ "$where" = container ]; then
		fix="$fix; this runs as uid $uid, for which --cap-add has no effect: use --ulimit memlock=-1"
	fi
	fail "memlock limit is $shown (needs 64 MiB or unlimited) and CAP_IPC_LOCK is $has_cap: registering RDMA memory will fail" "$fix"
fi

# ---- the binary
section "rdma-container"
bin=${RDMA_CONTAINER_BIN:-}
if [ -z "$bin" ]; then
	bin=$(command -v rdma-container || true)
fi
bin_doca=
if [ -z "$bin" ]; then
	fail "rdma-container is not on PATH" "install it, or set RDMA_CONTAINER_BIN=/path/to/rdma-container"
elif ! version=$("$bin" --version 2>&1); then
	fail "$bin --version does not run: $(printf '%s' "$version" | head -n 3 | tr '\n' ' ')" \
		"missing shared libraries show with: ldd $bin (the DOCA and rdma-core runtime libraries must be installed; in the image they are)"
else
	ok "$(printf '%s' "$version" | tr '\n' ';' | sed 's/;/; /g; s/; $//')"
	bin_doca=$(printf '%s\n' "$version" | sed -n 's/^DOCA: //p')
fi

# ---- DOCA
# `--version` says "DOCA: none (...)" without the doca transport, "DOCA: X (sim)" for the
# simulator (tests only), and "DOCA: X (real)" when built against an SDK, whose runtime it needs.
needs_doca() {
	case "$1" in
	none* | *"(sim)"*) return 1 ;;
	*) return 0 ;;
	esac
}
section "DOCA ($DOCA_DIR)"
if [ -d "$DOCA_DIR" ]; then
	doca_version=$(first_line "$DOCA_DIR/applications/VERSION")
	ok "DOCA installed${doca_version:+, applications/VERSION $doca_version}"
	libs=$(find "$DOCA_DIR"/lib* -maxdepth 2 -name 'libdoca_rdma.so*' 2>/dev/null | head -n 1 || true)
	if [ -n "$libs" ]; then
		ok "libdoca_rdma: $libs"
	else
		warn "no libdoca_rdma.so under $DOCA_DIR/lib*: the doca transport cannot run (install doca-sdk-rdma, or use the full-rt image)"
	fi
	if command -v pkg-config >/dev/null 2>&1; then
		pc_dirs=$(find "$DOCA_DIR" -maxdepth 4 -type d -name pkgconfig 2>/dev/null | tr '\n' ':')
		if pc=$(PKG_CONFIG_PATH="${pc_dirs}${PKG_CONFIG_PATH:-}" pkg-config --modversion doca-common 2>/dev/null); then
			ok "pkg-config doca-common: $pc"
		fi
	fi
elif [ -n "$bin_doca" ] && needs_doca "$bin_doca"; then
	fail "the binary was built against DOCA $bin_doca but $DOCA_DIR does not exist" \
		"run it in the DOCA runtime image it was built for, or install the DOCA runtime (doca-runtime) on this host"
elif [ -n "$bin_doca" ]; then
	ok "not installed, and the binary does not need it (DOCA: $bin_doca): no doca transport, verbs/tcp only"
else
	warn "not installed (the binary could not be asked whether it needs it)"
fi

# ---- the binary's own view
if [ -n "$bin" ] && [ -n "$bin_doca" ]; then
	section "rdma-container doctor"
	args=(doctor --sysfs-root "$SYSFS_ROOT")
	if [ -n "$peer_flag" ]; then args+=("$peer_flag" "$peer"); fi
	if report=$("$bin" "${args[@]}" 2>&1); then
		printf '%s\n' "$report" | sed 's/^/    /'
		if [ -n "$peer_flag" ]; then
			json=$("$bin" "${args[@]}" --json 2>/dev/null || true)
			if printf '%s\n' "$json" | grep -q '"choice": null'; then
				fail "doctor finds no RoCE v2 device/GID for $peer_flag $peer (see its problems above)" \
					"use the peer's/your RoCE-network address (not a management IP), and make sure the interface that owns it has a RoCE v2 GID (above)"
			elif printf '%s\n' "$json" | grep -q '"choice": {'; then
				ok "doctor chose a device for $peer_flag $peer (see 'choice:' above)"
			else
				fail "doctor --json gave no 'choice' field" "run $bin doctor $peer_flag $peer --json by hand"
			fi
		fi
	else
		fail "$bin doctor failed: $(printf '%s' "$report" | tail -n 1)" "run $bin doctor by hand (RUST_LOG=debug for more)"
	fi
fi

printf '\n'
if [ "$fails" -gt 0 ]; then
	printf 'NOT READY: %s failure(s), %s warning(s)\n' "$fails" "$warns"
	exit 1
fi
printf 'READY: %s warning(s)\n' "$warns"
