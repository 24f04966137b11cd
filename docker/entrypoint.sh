#!/bin/sh
# Container entrypoint for rdma-container.
#
# Before exec'ing the binary it checks what RDMA inside a container needs (device nodes, memlock
# limit or CAP_IPC_LOCK, the host's network namespace) and, for each thing missing, prints the
# `docker run` flag that fixes it. The checks warn and the binary starts anyway, unless
# RDMA_CONTAINER_STRICT=1. The binary is exec'd, so it becomes the container's main process and
# receives Ctrl-C / `docker stop` itself. Without arguments (the image has no CMD) it runs
# `rdma-container doctor`, or the session RDMA_CONTAINER_SERVER/_CLIENT describe when one of them
# is set. Run with --help for the details.
set -eu

me=rdma-container-entrypoint
BIN=${RDMA_CONTAINER_BIN:-/usr/local/bin/rdma-container}
DEV_ROOT=${RDMA_CONTAINER_DEV_ROOT:-/dev}
PROC_ROOT=${RDMA_CONTAINER_PROC_ROOT:-/proc}
SYSFS_ROOT=${RDMA_CONTAINER_SYSFS_ROOT:-/sys}
SKIP_CHECKS=${RDMA_CONTAINER_SKIP_CHECKS:-0}
STRICT=${RDMA_CONTAINER_STRICT:-0}
# Same threshold as `rdma-container doctor`: 64 MiB of locked memory without CAP_IPC_LOCK.
MEMLOCK_NEEDED_KB=65536

usage() {
	cat <<EOF
Usage: docker run [docker flags] IMAGE [rdma-container arguments]
       entrypoint.sh [rdma-container arguments]

Container entrypoint of rdma-container. It checks that the container can do RDMA, prints the
docker run flag that fixes each missing piece, then execs rdma-container with all arguments
(so Ctrl-C and docker stop reach the binary directly).

Without arguments (docker run IMAGE: the image has no CMD) it runs 'rdma-container doctor',
which needs no address and says what the container sees and lacks; when RDMA_CONTAINER_SERVER
or RDMA_CONTAINER_CLIENT is set (a pod configured by variables), it runs that session instead
(with RDMA_CONTAINER_TRANSPORT=tcp the checks are skipped, as for --transport tcp).

Checks (each prints the flag that fixes it):
  /dev/infiniband/uverbsN present      --device /dev/infiniband/uverbsN (N of your RDMA device)
  /dev/infiniband/rdma_cm present      --device /dev/infiniband/rdma_cm
  memlock >= 64 MiB or CAP_IPC_LOCK    --cap-add=IPC_LOCK   (or --ulimit memlock=-1)
  host network namespace (a RoCE       --network host
    GID's interface is visible here)

The checks only warn; the binary starts anyway (with --transport auto it falls back to TCP).
They are skipped for 'demo', 'help' and '--transport tcp', and never fatal for 'doctor',
'--version' or '--help'.

Environment:
  RDMA_CONTAINER_STRICT=1       refuse to start a --server/--client session when a check fails
                                (exit status 1)
  RDMA_CONTAINER_SERVER, RDMA_CONTAINER_CLIENT
                                read by the binary (= --server/--client); with no arguments,
                                either one makes the container run that session, not doctor
  RDMA_CONTAINER_SKIP_CHECKS=1  no checks, exec the binary at once
  RDMA_CONTAINER_BIN            the binary (default /usr/local/bin/rdma-container)
  RDMA_CONTAINER_DEV_ROOT       where infiniband/ is looked for (default /dev)
  RDMA_CONTAINER_PROC_ROOT      where self/status and self/limits are read (default /proc)
  RDMA_CONTAINER_SYSFS_ROOT     where class/infiniband, class/infiniband_verbs and class/net
                                are read (default /sys)

Exit status: the binary's, or 1 when RDMA_CONTAINER_STRICT=1 refused to start, or 127 when the
binary is missing.

rdma-container's own help follows.

EOF
}

problems=0
warn() {
	problems=$((problems + 1))
	printf '%s: warning: %s\n' "$me" "$*" >&2
}
note() {
	printf '%s: note: %s\n' "$me" "$*" >&2
}

# Sets $line to the first line of FILE, or to nothing when it cannot be read (a GID of another
# namespace, an unused GID slot). Only shell builtins: no process per file, since the GID loop
# below reads thousands of files (soft-RoCE has 1,024 GID slots per port) and a fork each cost
# seconds per container start under emulation.
read_first_line() {
	line=
	{ IFS= read -r line || true; } 2>/dev/null <"$1" || line=
}

# ---- what kind of invocation is this?
checks=1   # run the checks at all
fatal=0    # may a failed check stop the start (with RDMA_CONTAINER_STRICT=1)?
# No arguments: `docker run IMAGE` (there is no CMD) or a pod that sets only variables. The
# binary reads --server/--client from RDMA_CONTAINER_SERVER/_CLIENT, so a session described by
# them runs as is; anything else runs doctor instead of failing for want of an address.
if [ "$#" -eq 0 ]; then
	if [ -n "${RDMA_CONTAINER_SERVER:-}" ] || [ -n "${RDMA_CONTAINER_CLIENT:-}" ]; then
		fatal=1
		if [ "${RDMA_CONTAINER_TRANSPORT:-}" = tcp ]; then checks=0; fi
	else
		set -- doctor
	fi
fi
case "${1:-}" in
-h | --help)
	usage
	if [ -x "$BIN" ]; then
		exec "$BIN" --help
	fi
	printf '%s: %s is not there (RDMA_CONTAINER_BIN)\n' "$me" "$BIN" >&2
	exit 0
	;;
help | demo) checks=0 ;;
esac
prev=
for arg in "$@"; do
	case "$arg" in
	-s | --server | -c | --client | --server=* | --client=* | -s?* | -c?*) fatal=1 ;;
	--transport=tcp) checks=0 ;;
	tcp) if [ "$prev" = --transport ]; then checks=0; fi ;;
	esac
	prev=$arg
done
case "${1:-}" in
doctor | -V | --version) fatal=0 ;;
esac
if [ "$SKIP_CHECKS" = 1 ]; then
	checks=0
fi

if [ ! -x "$BIN" ]; then
	printf '%s: error: the rdma-container binary is not at %s (set RDMA_CONTAINER_BIN)\n' "$me" "$BIN" >&2
	exit 127
fi

if [ "$checks" = 1 ]; then
	# ---- 1. device nodes. Which uverbsN belongs to which device: class/infiniband_verbs/uverbsN/ibdev.
	ib_dev=$DEV_ROOT/infiniband
	present=
	for node in "$ib_dev"/uverbs*; do
		if [ -e "$node" ]; then
			present="$present ${node##*/}"
		fi
	done
	known=
	known_flags=
	for d in "$SYSFS_ROOT"/class/infiniband_verbs/uverbs*; do
		[ -d "$d" ] || continue
		n=${d##*/}
		read_first_line "$d/ibdev"
		ibdev=$line
		known="$known $n (${ibdev:-?})"
		known_flags="$known_flags --device /dev/infiniband/$n"
		case " $present " in
		*" $n "*) ;;
		*) if [ -n "$present" ]; then
			note "$n (${ibdev:-?}) is not passed into the container; if your RoCE address is on ${ibdev:-that device}, add --device /dev/infiniband/$n"
		fi ;;
		esac
	done
	if [ -z "$present" ]; then
		if [ -n "$known" ]; then
			warn "no /dev/infiniband/uverbsN device node in the container (the host has:$known): add$known_flags (only the one of the device your RoCE address is on is needed)"
		else
			warn "no /dev/infiniband/uverbsN device node in the container: add --device /dev/infiniband/uverbs0 (on the host, /sys/class/infiniband_verbs/uverbsN/ibdev tells which uverbsN belongs to which device)"
		fi
	fi
	if [ ! -e "$ib_dev/rdma_cm" ]; then
		warn "no /dev/infiniband/rdma_cm in the container: add --device /dev/infiniband/rdma_cm"
	fi

	# ---- 2. locked memory: CAP_IPC_LOCK (bit 14 of CapEff) or a large enough memlock limit.
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
	case "$cap_eff" in
	'' | *[!0-9a-fA-F]*) ;;
	*)
		# Bit 14 lies in the last four hex digits; taking only those avoids overflow.
		low=${cap_eff#"${cap_eff%????}"}
		if [ $((0x$low >> 14 & 1)) -eq 1 ]; then has_cap=yes; else has_cap=no; fi
		;;
	esac
	# The soft limit from self/limits ("Max locked memory  SOFT  HARD  bytes"): what `ulimit -l`
	# shows, read the same way as the capabilities so that both can be faked for tests.
	memlock=unknown
	if [ -r "$PROC_ROOT/self/limits" ]; then
		while read -r w1 w2 w3 soft _rest; do
			if [ "$w1 $w2 $w3" = "Max locked memory" ]; then
				case "$soft" in
				unlimited) memlock=unlimited ;;
				'' | *[!0-9]*) ;;
				*) memlock=$((soft / 1024)) ;;
				esac
			fi
		done <"$PROC_ROOT/self/limits"
	fi
	memlock_ok=no
	case "$memlock" in
	unlimited) memlock_ok=yes ;;
	unknown) ;;
	*) if [ "$memlock" -ge "$MEMLOCK_NEEDED_KB" ]; then memlock_ok=yes; fi ;;
	esac
	if [ "$memlock_ok" = no ] && [ "$has_cap" != yes ]; then
		if [ "$memlock" = unknown ]; then
			msg="the memlock limit is unknown ($PROC_ROOT/self/limits unreadable) and CAP_IPC_LOCK is"
		else
			msg="memlock limit is $memlock KiB and CAP_IPC_LOCK is"
		fi
		if [ "$has_cap" = no ]; then msg="$msg not in effect"; else msg="$msg unknown ($PROC_ROOT/self/status unreadable)"; fi
		msg="$msg: RDMA memory registration will fail; add --cap-add=IPC_LOCK (or --ulimit memlock=-1)"
		if [ -n "$uid" ] && [ "$uid" != 0 ]; then
			msg="$msg; this container runs as uid $uid, for which docker's --cap-add takes no effect (podman's does), so use --ulimit memlock=-1"
		fi
		warn "$msg"
	fi

	# ---- 3. host network: the network interface of at least one GID must be in this namespace.
	# GID attributes of another namespace cannot be read, and a container with its own network
	# namespace does not see the host's interfaces under class/net.
	devices=
	for d in "$SYSFS_ROOT"/class/infiniband/*; do
		if [ -d "$d" ]; then devices="$devices ${d##*/}"; fi
	done
	if [ -z "$devices" ]; then
		warn "no RDMA devices under $SYSFS_ROOT/class/infiniband: on the host, load the NIC's RDMA driver (mlx5_ib) or set up soft-RoCE (scripts/setup-soft-roce.sh); no docker run flag can fix this, and only --transport tcp works until then"
	else
		seen=
		visible=
		# One pass, builtins only; it stops at the first interface visible here.
		for f in "$SYSFS_ROOT"/class/infiniband/*/ports/*/gid_attrs/ndevs/*; do
			read_first_line "$f"
			ndev=$line
			[ -n "$ndev" ] || continue
			case " $seen " in *" $ndev "*) continue ;; esac
			seen="$seen $ndev"
			if [ -e "$SYSFS_ROOT/class/net/$ndev" ]; then
				visible=$ndev
				break
			fi
		done
		if [ -z "$visible" ]; then
			if [ -n "$seen" ]; then
				what="none of the RDMA devices' network interfaces (${seen# }) is in this container's network namespace"
			else
				what="the RDMA devices'$devices GIDs show no network interface readable from this container's network namespace"
			fi
			warn "$what: add --network host (RoCE needs the host's interfaces and addresses)"
		fi
	fi

	if [ "$problems" -gt 0 ]; then
		if [ "$fatal" = 1 ] && [ "$STRICT" = 1 ]; then
			printf '%s: error: refusing to start: %s problem(s) above (RDMA_CONTAINER_STRICT=1)\n' "$me" "$problems" >&2
			exit 1
		fi
		note "starting anyway ($problems problem(s) above; RDMA_CONTAINER_STRICT=1 refuses to start, RDMA_CONTAINER_SKIP_CHECKS=1 silences this)"
	fi
fi

exec "$BIN" "$@"
