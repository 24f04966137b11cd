#!/usr/bin/env bash
# softroce-vm.sh: run rdma-container over real soft-RoCE (rdma_rxe) inside a throw-away QEMU VM.
#
# The host kernel of our CI machines has no RDMA support, but a Debian kernel booted under QEMU
# does. This script
#   1. installs the host tools it needs with apt (only those that are missing),
#   2. builds the release binary (or takes --binary),
#   3. downloads a Debian kernel (trixie-backports, Linux 7.x: its rdma_rxe works across network
#      namespaces) and keeps vmlinuz plus the few modules we need in a cache,
#   4. packs an initramfs from Debian packages installed on the host (busybox, bash, iproute2,
#      rdma-core with the rxe provider, perftest, jq) plus the binary and its ldd libraries,
#   5. boots it with QEMU (KVM when it really works, TCG otherwise) without any NIC (-nic none),
#   6. lets the guest (softroce-vm/guest-init.sh + guest-checks.sh) create two network
#      namespaces joined by a veth pair with an rxe device on each end and run the checks,
#   7. collects the result lines from the serial console and exits 0 only if every check passed.
#
# Run `scripts/softroce-vm.sh --help` for the options; docs/softroce-vm.md has the details.
set -Eeuo pipefail
# Any command failing where we did not expect it: say where, exit as a setup error.
set_err_trap() { trap 'on_unexpected_error $? $LINENO "$BASH_COMMAND"' ERR; }
set_err_trap

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
GUEST_DIR=$SCRIPT_DIR/softroce-vm
# shellcheck source=scripts/softroce-vm/host-aarch64.sh
. "$GUEST_DIR/host-aarch64.sh"
PROG=softroce-vm

# Exit codes.
readonly EXIT_PASS=0 EXIT_FAIL=1 EXIT_NO_RESULT=2 EXIT_SETUP=3 EXIT_USAGE=64

# ---------------------------------------------------------------------------------------------
# Settings (command line > environment > default)
# ---------------------------------------------------------------------------------------------
TRANSPORT=${SOFTROCE_VM_TRANSPORT:-verbs}
CHECKS=messages,peer-lost,doctor,baseline
BINARY=
COMPARE_BINARY="" # --compare-binary: another build, timed beside ours in the baseline
EVENT_LOOP_COST="" # the baseline check's examples/event_loop_cost (built in prepare_binary)
QP_PINGPONG=""     # the qp-pingpong check's verbs-sys example (built in prepare_binary)
GUEST_ARCH=amd64 # --arch: amd64 (x86_64) or arm64 (aarch64; scripts/softroce-vm/host-aarch64.sh)
CHECKS_GIVEN=
OCI=${SOFTROCE_VM_OCI:-}
TEST_BINARY=
SUITE_TARGET_DIR=      # where the suite check's release test executables are built (--suite-target-dir)
ACCEL=auto
VM_TIMEOUT=900
TRANSFER_TIMEOUT=300
LAT_ROUNDS=5
MEM=
SMP=2
KERNEL_SUITE=${SOFTROCE_VM_KERNEL_SUITE:-trixie-backports}
# The kernel, pinned so that every CI run boots the same one (docs/softroce-vm.md says how to
# move the pin). "latest" = whatever linux-image-amd64 of the suite depends on today.
# SOFTROCE_VM_KERNEL_PIN replaces the pin (the fallback's test names one the archive never had).
KERNEL_PKG_PINNED=${SOFTROCE_VM_KERNEL_PIN:-linux-image-7.3.4+deb13-amd64}
KERNEL_PKG=${SOFTROCE_VM_KERNEL_PKG:-$KERNEL_PKG_PINNED}
PREPARE_KERNEL_ONLY=0
CACHE=${SOFTROCE_VM_CACHE:-$REPO_ROOT/target/softroce-vm}
CONSOLE_COPY=
QUIET=0
SHELL_AT_END=0
NO_APT=${SOFTROCE_VM_NO_APT:-0}
RUN_KEEP=10            # run directories (console logs) kept in the cache

# Kernel modules the guest loads (their dependencies come along, in order). overlay: podman's
# storage in the container check; inet_diag, tcp_diag: ss -K in the link-flap checks (always
# bundled, so that the cached bundle fits every run).
GUEST_MODULES=(rdma_rxe ib_uverbs rdma_ucm veth overlay inet_diag tcp_diag)

usage() {
	cat <<EOF
Usage: scripts/softroce-vm.sh [options]

Boots a Debian kernel under QEMU with soft-RoCE (rdma_rxe), two network namespaces joined by a
veth pair with an rxe device on each end, and runs rdma-container's server and client over it.

Checks (all by default; result lines "SOFTROCE-TEST <name> PASS|FAIL|SKIP detail"):
  messages    10,000 messages in order (server stdout = seq 0 9999), the session log line names
              the expected transport (and, for verbs/auto, the rxe device and GID), rxe packet
              counters moved (verbs/auto), then 1999 x 64 KiB messages with 16 credits
  peer-lost   client SIGKILLed mid-stream: the server reports "peer lost" within a few seconds
              of its resume wait (--resume-timeout 3)
  link-flap   sessions broken mid-stream resume and deliver every message once, in order:
              vB (under the server's rxe device) down for 4 s (the sender's QP fails, new QPs),
              with 10,000 messages (over one queue pair, then over four: --qps 4) and with
              1,000 x 64 KiB, --checksum crc32c, 16 credits; the
              client's control connection killed (ss -K) mid-stream, and while the sender
              waits after Finish (a test build's receiver stalls). Not in the default set
              (.ci/run adds it)
  paths       one stream over two paths (--paths, --qps 4): a second veth pair with an rxe
              device on each end, made for this check only; 10,000 x 4 KiB each way, every
              byte as sent, each path on its own device; then the second path down for 4 s
              mid-stream, and down for good: every message once, in order, the session
              resumed (the second time without that path). Not in the default set (.ci/run
              adds it)
  doctor      'doctor --peer' (text and --json) in the client namespace: rxe GID table + choice;
              'doctor --require-rdma' exits 0 there (5 without devices);
              'doctor --probe' against a server: 2 messages on the chosen device and GID
  baseline    ib_send_bw / ib_send_lat (explicit GID index) vs our client/server, same sizes,
              same device, same boot: a table of ratios (ours / perftest)
  event-loop-cost
              the library's event-loop calls (try_* with poll, tokio) against its blocking ones
              over verbs (examples/event_loop_cost.rs, built in release here). Not in the
              default set, nor in .ci/run: run it by hand (BENCHMARKS.md has its figures)
  lat-profile where a ping-pong's user-space instructions go: bench lat and ib_send_lat, both
              ends under valgrind's callgrind, instructions per round trip, the functions
              that take them and the footprint (the distinct instructions run every round
              trip) (needs valgrind on the host). Not in the default set, nor in .ci/run: a
              diagnostic to run by hand
  qp-pingpong a 2 B ping-pong over one queue pair per end, over one each way, and over one
              per end touching 256 pages per round trip (verbs-sys's examples/qp_pingpong.rs,
              built here), ib_send_lat and bench lat, alternated over 5 rounds: does bench
              lat's second queue pair per end, or the memory a round trip touches, cost
              latency on rxe? Medians of t_avg, t_typical and t_min, and the client's
              send call against the rest of its round trip. Not in the default set, nor
              in .ci/run: a diagnostic to run by hand
  lat-perf    what the guest's kernel does during a ping-pong and where its time goes:
              qp_pingpong (one queue pair each way), ib_send_lat and bench lat, first their
              tracepoints and system calls per round trip (perf stat -a), then 20,000
              round trips each under a system-wide perf record (the host's perf, copied
              in: apt-get install linux-perf), the shares by CPU, program and library, and
              the top symbols. Not in the default set, nor in .ci/run: a diagnostic to run
              by hand
  lat-trace   where each half of a ping-pong's round trip goes, as the guest kernel sees it:
              kprobes on rxe_post_send, rxe_receiver and rxe_cq_post time the sender's post to
              the responder's start, the responder's work to the completion, and the receiving
              end's reaction to its reply's post; qp_pingpong (one queue pair each way),
              ib_send_lat and bench lat, three rounds, medians and means on SOFTROCE-LAT-TRACE
              lines. Not in the default set, nor in .ci/run: a diagnostic to run by hand
  lat-syscalls
              system calls per round trip of bench lat and ib_send_lat, each end, by class
              (our TCP sockets, the RDMA device files, waits, other), from a 300 and a
              1,300 round-trip run of each under strace (SOFTROCE-LAT-SYSCALLS lines). Not in
              the default set, nor in .ci/run: a diagnostic to run by hand
  container   the roce image (scripts/container-test.sh) under podman in the guest, with the
              flags docs/containers.md gives (device nodes, IPC_LOCK, memlock, host network),
              RDMA_CONTAINER_STRICT=1, --transport verbs: 10,000 messages in order over rxe,
              rxe counters moved; without --device it refuses to start; as uid 1000 with only
              IPC_LOCK or only a memlock limit it works, with neither it fails naming them;
              podman kube play of deploy/kubernetes/shared (scripts/kube-play.py's
              substitutions), RDMA required: 10,000 messages over verbs, probe 0, stop 143.
              Not in the default set: .ci/run adds it (--checks ...,container)
  suite       the behavioural test suites (tests/process.rs, tests/sessions.rs, ..., built with
              cargo test --no-run) run inside the guest over verbs: RDMA_TEST_TRANSPORT=verbs,
              RDMA_TEST_ADDR=198.18.1.2 (both ends on rxeB), RDMA_TEST_STRICT=1. Not in the
              default set (.ci/run adds it)
  transport   the library's own verbs transport tests (cargo test --lib, filter
              transport::verbs::) on rxeB: a sender and a receiver transport joined by real RC QPs,
              e.g. a data path reset for a resumed session (sends given back, receives posted
              again in order, new QPs).
              Not in the default set (.ci/run adds it)
  rnr         sessions (10,000 x 1 credit, 2000 x 4 KiB, 1999 x 64 KiB x 16 credits) with a
              test build (--features test-hooks) whose QPs have rnr_retry 0: a receive-not-
              ready race fails instead of being retried. Not in the default set (.ci/run adds it)

Options:
  --transport T      verbs (default), auto or tcp: what the server and client are run with
                     (env SOFTROCE_VM_TRANSPORT)
  --arch A           x86_64 (default) or aarch64: an aarch64 guest (qemu-system-aarch64,
                     TCG) with an arm64 kernel and user space from Debian's arm64 packages,
                     running the aarch64 binary (default dist/aarch64/rdma-container from
                     scripts/build-aarch64.sh); checks messages, peer-lost, doctor and
                     container (the arm64 image: scripts/container-test.sh --arch arm64)
                     (default messages,peer-lost); the kernel: the newest of the suite
  --checks LIST      comma-separated subset of: messages,peer-lost,link-flap,paths,doctor,baseline,
                     event-loop-cost,lat-profile,qp-pingpong,lat-perf,lat-trace,lat-syscalls,
                     container,rnr,suite,transport
                     (default: $CHECKS)
  --binary PATH      use this rdma-container binary instead of building one with
                     'cargo build --release --locked'
  --compare-binary PATH
                     another rdma-container build (an older commit, say) that the baseline
                     check times in the same boot: its bench lat runs alternate with ours
                     and perftest's, and a note gives its median and the ratio new / other
                     (under TCG only a ratio within one boot means anything); the lat-profile
                     check profiles it too
  --accel A          auto (default: KVM if it really boots a kernel, else TCG), kvm or tcg
  --timeout SEC      wall-clock limit for the whole VM run (default $VM_TIMEOUT)
  --lat-rounds N     the baseline's alternated latency runs per tool, whose medians it compares
                     (default 5; CI asks for 3)
  --transfer-timeout SEC
                     limit for one client run inside the VM (default $TRANSFER_TIMEOUT); after
                     one of our transfers hits it, the later ones are not started
  --test-binary PATH the test build for the rnr, link-flap and paths checks (default: cargo build --release --features
                     test-hooks, in <cache>/test-hooks-target)
  --suite-target-dir DIR
                     the cargo target directory the suite check's test executables are built
                     in (cargo test --release --features test-hooks --no-run; default
                     <cache>/test-hooks-target, beside the default test build): a directory
                     that already holds a release test-hooks build compiles only the tests
  --oci DIR          the image for the container check, as an OCI layout (tag rdma-container)
                     made by scripts/container-test.sh --oci-out DIR (env SOFTROCE_VM_OCI;
                     default: run scripts/container-test.sh to make one in the cache)
  --mem MB           guest memory (default 1024, 2048 with the container check)
  --smp N            guest CPUs (default $SMP)
  --kernel-suite S   Debian suite for the kernel (default $KERNEL_SUITE; env
                     SOFTROCE_VM_KERNEL_SUITE); 'host' = the host's own apt sources
  --kernel-pkg NAME  the linux-image-* package to boot (default, pinned: $KERNEL_PKG_PINNED;
                     env SOFTROCE_VM_KERNEL_PKG); 'latest' = what linux-image-amd64 of the
                     suite depends on today
                     When the pin is gone from the archive (and no other package was asked
                     for), the newest kernel with rdma_rxe is booted instead, with a warning
                     naming both
  --prepare-kernel-only
                     resolve, download and bundle the kernel, print "kernel PACKAGE", exit
  --console FILE     also copy the guest console log to FILE
  --quiet            do not stream the guest console; print only the results
  --shell            interactive: open a shell in the guest after the checks (exit to power off)
  -h, --help         this text

Environment:
  SOFTROCE_VM_CACHE   cache directory (default <repo>/target/softroce-vm): kernel, apt lists,
                      run directories with the console logs (the newest $RUN_KEEP are kept)
  SOFTROCE_VM_NO_APT  1 = never run apt-get (fail if something is missing or not cached)
  SOFTROCE_VM_MIRROR  Debian archive URL (default: the one this host's apt sources use)
  CARGO_TARGET_DIR    where the release binary is built (default <repo>/target)

Exit status: 0 every check passed, 1 a check failed, 2 no result (VM hung, crashed or timed
out), 3 setup error (packages, kernel, build), 64 usage error.
EOF
}

# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------
log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
# shellcheck disable=SC2317 # called by the ERR trap
on_unexpected_error() { # status line command
	local where=""
	[ "$BASH_SUBSHELL" = 0 ] || where=" in a subshell"
	log "error: '$3' failed with status $1 (line $2$where)"
	exit "$EXIT_SETUP"
}
die() { log "error: $*"; exit "$EXIT_SETUP"; }
usage_error() { log "$*"; log "try --help"; exit "$EXIT_USAGE"; }
now() { date +%s.%N; }
# Seconds since the timestamp $1, one decimal.
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# Runs a command as root (sudo when we are not root).
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

parse_args() {
	while [ $# -gt 0 ]; do
		case "$1" in
		--transport | --checks | --binary | --compare-binary | --accel | --timeout | --transfer-timeout | --lat-rounds | --mem | --smp | \
			--kernel-suite | --kernel-pkg | --console | --oci | --test-binary | --suite-target-dir | --arch)
			if [ $# -lt 2 ] || [ -z "$2" ]; then usage_error "$1 needs a value"; fi ;;
		esac
		case "$1" in
		--transport) TRANSPORT=$2; shift 2 ;;
		--arch)
			case "$2" in x86_64 | amd64) GUEST_ARCH=amd64 ;; aarch64 | arm64) GUEST_ARCH=arm64 ;;
			*) usage_error "--arch must be x86_64 or aarch64" ;; esac
			shift 2 ;;
		--checks) CHECKS=$2; CHECKS_GIVEN=1; shift 2 ;;
		--binary) BINARY=$2; shift 2 ;;
		--compare-binary) COMPARE_BINARY=$2; shift 2 ;;
		--oci) OCI=$2; shift 2 ;;
		--test-binary) TEST_BINARY=$2; shift 2 ;;
		--suite-target-dir) SUITE_TARGET_DIR=$2; shift 2 ;;
		--accel) ACCEL=$2; shift 2 ;;
		--timeout) VM_TIMEOUT=$2; shift 2 ;;
		--transfer-timeout) TRANSFER_TIMEOUT=$2; shift 2 ;;
		--lat-rounds) LAT_ROUNDS=$2; shift 2 ;;
		--mem) MEM=$2; shift 2 ;;
		--smp) SMP=$2; shift 2 ;;
		--kernel-suite) KERNEL_SUITE=$2; shift 2 ;;
		--kernel-pkg) KERNEL_PKG=$2; shift 2 ;;
		--console) CONSOLE_COPY=$2; shift 2 ;;
		--quiet) QUIET=1; shift ;;
		--prepare-kernel-only) PREPARE_KERNEL_ONLY=1; shift ;;
		--shell) SHELL_AT_END=1; shift ;;
		-h | --help) usage; exit 0 ;;
		*) usage_error "unknown option: $1" ;;
		esac
	done
	case "$TRANSPORT" in verbs | auto | tcp) ;; *) usage_error "--transport must be verbs, auto or tcp" ;; esac
	case "$ACCEL" in auto | kvm | tcg) ;; *) usage_error "--accel must be auto, kvm or tcg" ;; esac
	local c
	if [ "$GUEST_ARCH" = arm64 ]; then
		[ -n "$CHECKS_GIVEN" ] || CHECKS=messages,peer-lost
		[ "$ACCEL" != kvm ] || usage_error "--arch aarch64 runs under TCG (no KVM for another architecture)"
		ACCEL=tcg
		# the pin is an amd64 package: the newest arm64 kernel of the suite, unless one is named
		[ "$KERNEL_PKG" != "$KERNEL_PKG_PINNED" ] || KERNEL_PKG=latest
		KERNEL_PKG_PINNED=none
		[ "$KERNEL_SUITE" != host ] || usage_error "--arch aarch64 needs a suite (--kernel-suite), not host"
		[ -z "$COMPARE_BINARY" ] || usage_error "--compare-binary is timed by the baseline check, which --arch aarch64 does not run"
		for c in ${CHECKS//,/ }; do
			case "$c" in messages | peer-lost | doctor | container) ;; *) usage_error "check $c does not run on --arch aarch64 (messages, peer-lost, doctor, container)" ;; esac
		done
	fi
	for c in ${CHECKS//,/ }; do
		case "$c" in messages | peer-lost | link-flap | paths | doctor | baseline | event-loop-cost | lat-profile | qp-pingpong | lat-perf | lat-trace | lat-syscalls | container | rnr | suite | transport) ;; *) usage_error "unknown check: $c" ;; esac
	done
	if [ -n "$COMPARE_BINARY" ] && ! want_check baseline && ! want_check lat-profile; then
		usage_error "--compare-binary is timed by the baseline and lat-profile checks; --checks has neither"
	fi
	if [ -z "$MEM" ]; then
		MEM=1024
		if want_check container; then MEM=2048; fi
	fi
	[[ "$VM_TIMEOUT" =~ ^[0-9]+$ && "$TRANSFER_TIMEOUT" =~ ^[0-9]+$ && "$MEM" =~ ^[0-9]+$ && "$SMP" =~ ^[0-9]+$ ]] ||
		usage_error "--timeout, --transfer-timeout, --mem and --smp take whole numbers"
	[[ "$LAT_ROUNDS" =~ ^[1-9][0-9]?$ ]] || usage_error "--lat-rounds takes a whole number from 1 to 99"
	return 0
}

want_check() { [[ ",$CHECKS," == *",$1,"* ]]; }

# ---------------------------------------------------------------------------------------------
# 1. Host packages
# ---------------------------------------------------------------------------------------------
# Debian package -> a file it installs that we use (on the host or copied into the guest).
declare -A HOST_PACKAGES=(
	[qemu-system-x86]=/usr/bin/qemu-system-x86_64
	[busybox-static]=/bin/busybox
	[kmod]=/sbin/modinfo
	[cpio]=/usr/bin/cpio
	[xz-utils]=/usr/bin/xz
	[zstd]=/usr/bin/zstd
	[iproute2]=/usr/bin/rdma
	[ibverbs-providers]=/etc/libibverbs.d/rxe.driver
	[ibverbs-utils]=/usr/bin/ibv_devinfo
	[perftest]=/usr/bin/ib_send_bw
	[strace]=/usr/bin/strace
	[jq]=/usr/bin/jq
	[bsdextrautils]=/usr/bin/column
	[debian-archive-keyring]=/usr/share/keyrings/debian-archive-keyring.gpg
)

ensure_host_packages() {
	local pkg missing=()
	if [ "$GUEST_ARCH" = arm64 ]; then
		HOST_PACKAGES[qemu-system-arm]=/usr/bin/qemu-system-aarch64
		HOST_PACKAGES[mmdebstrap]=/usr/bin/mmdebstrap
		HOST_PACKAGES[file]=/usr/bin/file
	fi
	if want_check container && [ "$GUEST_ARCH" = arm64 ]; then
		# the guest's podman comes from arm64 packages; the host's makes the arm64 image
		HOST_PACKAGES[podman]=/usr/bin/podman
		HOST_PACKAGES[python3-yaml]=/usr/lib/python3/dist-packages/yaml/__init__.py
	elif want_check container; then
		# podman, conmon and runc are copied into the guest
		HOST_PACKAGES[podman]=/usr/bin/podman
		HOST_PACKAGES[conmon]=/usr/bin/conmon
		HOST_PACKAGES[runc]=/usr/sbin/runc
		HOST_PACKAGES[golang-github-containers-common]=/usr/share/containers/seccomp.json
		# podman's pods need it for their infra container (kube play)
		HOST_PACKAGES[catatonit]=/usr/bin/catatonit
		# scripts/kube-play.py (the container check's kube play) reads YAML with it
		HOST_PACKAGES[python3-yaml]=/usr/lib/python3/dist-packages/yaml/__init__.py
	fi
	for pkg in "${!HOST_PACKAGES[@]}"; do
		[ -e "${HOST_PACKAGES[$pkg]}" ] || missing+=("$pkg")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	[ "$NO_APT" = 1 ] && die "missing host packages (SOFTROCE_VM_NO_APT=1): ${missing[*]}"
	log "installing host packages: ${missing[*]}"
	as_root apt-get update -qq >/dev/null || die "apt-get update failed"
	DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends \
		"${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
}

# ---------------------------------------------------------------------------------------------
# 2. The binary under test
# ---------------------------------------------------------------------------------------------
prepare_binary() {
	if [ "$GUEST_ARCH" = arm64 ]; then
		prepare_binary_aarch64
		return 0
	fi
	if [ -z "$BINARY" ]; then
		local target=${CARGO_TARGET_DIR:-$REPO_ROOT/target}
		log "building the release binary (cargo build --release --locked, target dir $target)"
		(cd "$REPO_ROOT" && cargo build --release --locked --quiet) || die "cargo build --release failed"
		BINARY=$target/release/rdma-container
	fi
	[ -x "$BINARY" ] || die "no executable binary at $BINARY"
	BINARY=$(cd "$(dirname "$BINARY")" && pwd)/$(basename "$BINARY")
	if [ -n "$COMPARE_BINARY" ]; then
		[ -x "$COMPARE_BINARY" ] || die "no executable binary at $COMPARE_BINARY (--compare-binary)"
		log "compare binary: $COMPARE_BINARY ($("$COMPARE_BINARY" --version 2>/dev/null | head -n 1))"
	fi
	if want_check event-loop-cost; then
		local target=${CARGO_TARGET_DIR:-$REPO_ROOT/target}
		log "building the event-loop cost example (cargo build --release --example event_loop_cost)"
		(cd "$REPO_ROOT" && cargo build --release --locked --quiet --example event_loop_cost) ||
			die "cargo build --example event_loop_cost failed"
		EVENT_LOOP_COST=$target/release/examples/event_loop_cost
	fi
	if want_check qp-pingpong || want_check lat-perf || want_check lat-trace; then
		local target=${CARGO_TARGET_DIR:-$REPO_ROOT/target}
		log "building the queue-pair ping-pong example (cargo build --release -p verbs-sys --example qp_pingpong)"
		(cd "$REPO_ROOT" && cargo build --release --locked --quiet -p verbs-sys --example qp_pingpong) ||
			die "cargo build --example qp_pingpong failed"
		QP_PINGPONG=$target/release/examples/qp_pingpong
	fi
	local transports
	transports=$({ "$BINARY" --version 2>/dev/null || true; } | awk -F': *' '/^transports:/ { print $2 }')
	log "binary: $BINARY (transports: ${transports:-unknown})"
	if [ "$TRANSPORT" != tcp ] && ! grep -qw verbs <<<"$transports"; then
		log "warning: this build has no verbs transport; the checks that need it will fail"
	fi
}

# The test build for the rnr, link-flap and paths checks: --test-binary, or built here (its own target directory, so
# that the release binary of the default features stays as it is).
prepare_test_binary() {
	want_check rnr || want_check link-flap || want_check paths || return 0
	if [ -z "$TEST_BINARY" ]; then
		log "building the test build (cargo build --release --locked --features test-hooks)"
		(cd "$REPO_ROOT" && cargo build --release --locked --quiet --features test-hooks \
			--target-dir "$CACHE/test-hooks-target") || die "cargo build --features test-hooks failed"
		TEST_BINARY=$CACHE/test-hooks-target/release/rdma-container
	fi
	[ -x "$TEST_BINARY" ] || die "no executable test build at $TEST_BINARY"
	"$TEST_BINARY" --version 2>/dev/null | grep -q '^test hooks: on' ||
		die "$TEST_BINARY is not a test build (--features test-hooks): its --version has no 'test hooks: on'"
}

# The test executables for the suite check, and the binary they run (its path is compiled into
# them, so the guest gets it at the same path). Release builds: under TCG the suites' own code
# (both ends of every session, checksums over 10 MiB messages) took 996 s of a CI boot as debug
# builds and 342 s as release builds (2026-11-30); the compile costs about 130 s on the host.
SUITE_TESTS=(process sessions session rules soak alloc checksum restart credits_rule event_loop tokio)
SUITE_EXES=()
prepare_suite() {
	want_check suite || return 0
	local kind name exe args=()
	for name in "${SUITE_TESTS[@]}"; do args+=(--test "$name"); done
	# A test build (--features test-hooks), so that the hook-driven tests (a message corrupted
	# after its CRC32C) run over verbs too; the hooks act only when their variables are set.
	args+=(--release --features test-hooks --target-dir "${SUITE_TARGET_DIR:-$CACHE/test-hooks-target}")
	log "building the test suites for the guest (cargo test --no-run ${args[*]})"
	while read -r kind name exe; do
		if [ -z "$exe" ] || [ "$exe" = null ]; then continue; fi
		SUITE_EXES+=("$exe")
		[ "$kind" = bin ] && log "suite binary: $exe"
	done < <(cd "$REPO_ROOT" && cargo test --locked --no-run --quiet --message-format=json "${args[@]}" 2>/dev/null |
		jq -r 'select(.reason == "compiler-artifact" and .executable != null) | "\(.target.kind[0]) \(.target.name) \(.executable)"')
	[ ${#SUITE_EXES[@]} -eq $((${#SUITE_TESTS[@]} + 1)) ] ||
		die "cargo test --no-run gave ${#SUITE_EXES[@]} executables, expected the ${SUITE_TESTS[*]} tests and the binary"
}

# The library's unit-test executable for the transport check (the verbs transport's tests that
# need a device run there; the guest runs only those, filtered by name).
TRANSPORT_TEST_EXE=""
prepare_transport_tests() {
	want_check transport || return 0
	log "building the library's unit tests for the guest (cargo test --no-run --lib)"
	TRANSPORT_TEST_EXE=$(cd "$REPO_ROOT" && cargo test --locked --no-run --quiet --lib --message-format=json 2>/dev/null |
		jq -r 'select(.reason == "compiler-artifact" and .executable != null and .target.kind[0] == "lib") | .executable' | tail -n 1)
	if [ -z "$TRANSPORT_TEST_EXE" ] || [ ! -x "$TRANSPORT_TEST_EXE" ]; then
		die "cargo test --no-run --lib gave no unit-test executable for the library"
	fi
}

# The image for the container check: --oci, or one made by scripts/container-test.sh from the
# same binary (which also runs that script's host checks).
prepare_oci() {
	want_check container || return 0
	if [ -z "$OCI" ]; then
		OCI=$CACHE/oci
		[ "$GUEST_ARCH" = amd64 ] || OCI=$CACHE/oci-$GUEST_ARCH
		log "making the $GUEST_ARCH image for the container check (scripts/container-test.sh --arch $GUEST_ARCH --oci-out $OCI)"
		"$SCRIPT_DIR/container-test.sh" --arch "$GUEST_ARCH" --binary "$BINARY" --oci-out "$OCI" --no-lint >&2 ||
			die "scripts/container-test.sh failed: no image for the container check"
	fi
	[ -f "$OCI/index.json" ] || die "no OCI layout at $OCI (scripts/container-test.sh --oci-out $OCI makes one)"
	OCI=$(cd "$OCI" && pwd)
	log "container image: $OCI ($(du -sh "$OCI" | cut -f1))"
}

# ---------------------------------------------------------------------------------------------
# 3. Kernel: vmlinuz + the modules we need, cached per kernel package
# ---------------------------------------------------------------------------------------------
APT_OPTS=()

# The Debian archive the host's apt already uses (one-line or deb822 sources).
host_debian_mirror() {
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] && cat "$f"
	done | { grep -oE '(https?|file):[^ ]*/debian/?( |$)' || true; } | head -n 1 | tr -d ' ' | sed 's:/$::'
}

# Points apt at a private sources list and private lists/cache under $CACHE/apt/<suite>, so the
# host's apt configuration is neither used nor touched ("host" uses the host's sources).
setup_private_apt() {
	[ "$KERNEL_SUITE" = host ] && return 0
	local dir=$CACHE/apt/$KERNEL_SUITE${GUEST_ARCH/#amd64/} mirror
	mirror=${SOFTROCE_VM_MIRROR:-$(host_debian_mirror)}
	[ -n "$mirror" ] || die "no Debian archive in the host's apt sources; set SOFTROCE_VM_MIRROR"
	mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/sources.list.d"
	printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n' \
		"$mirror" "$KERNEL_SUITE" >"$dir/sources.list"
	APT_OPTS=(-o "Dir::Etc::SourceList=$dir/sources.list" -o "Dir::Etc::SourceParts=$dir/sources.list.d"
		-o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache")
	# the guest's architecture's packages (the lists are cached per suite and architecture)
	[ "$GUEST_ARCH" = amd64 ] || APT_OPTS+=(-o "APT::Architecture=$GUEST_ARCH" -o "APT::Architectures=$GUEST_ARCH")
}

apt_update() {
	[ "$NO_APT" = 1 ] && die "package lists for ${KERNEL_SUITE} are needed but SOFTROCE_VM_NO_APT=1"
	log "apt-get update (${KERNEL_SUITE})"
	if [ "$KERNEL_SUITE" = host ]; then
		as_root apt-get update -qq >/dev/null 2>&1
	else
		apt-get "${APT_OPTS[@]}" update -qq >/dev/null 2>&1
	fi || die "apt-get update for ${KERNEL_SUITE} failed"
}

# The versioned image package linux-image-amd64 points at (e.g. linux-image-7.3.4+deb13-amd64).
resolve_kernel_pkg() {
	{ apt-cache "${APT_OPTS[@]}" depends "linux-image-$GUEST_ARCH" 2>/dev/null || true; } |
		awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
}

# The packages holding the files (7.x splits the image into linux-binary-* and linux-modules-*).
kernel_debs() {
	printf '%s\n' "$KERNEL_PKG"
	{ apt-cache "${APT_OPTS[@]}" depends "$KERNEL_PKG" 2>/dev/null || true; } |
		awk '$1 == "Depends:" && $2 ~ /^linux-(binary|modules)-/ { print $2 }' | sort -u
}

# Adds module NAME and (first) the modules it depends on to BUNDLE: decompressed (busybox
# insmod reads plain .ko) into BUNDLE/modules/, its name appended to BUNDLE/modules.order.
# modinfo reads .ko.xz/.ko.zst directly, so no depmod over the whole tree is needed.
declare -A MODULE_FILE=() MODULE_DONE=()
bundle_module() { # name bundle
	local m=${1//-/_} dep out
	[ -n "${MODULE_DONE[$m]:-}" ] && return 0
	MODULE_DONE[$m]=1
	[ -n "${MODULE_FILE[$m]:-}" ] || return 0 # built into the kernel
	for dep in $(modinfo -F depends "${MODULE_FILE[$m]}" | tr ',' ' '); do bundle_module "$dep" "$2"; done
	out=$2/modules/$m.ko
	case "${MODULE_FILE[$m]}" in
	*.ko.xz) xz -dc "${MODULE_FILE[$m]}" >"$out" ;;
	*.ko.zst) zstd -qdc "${MODULE_FILE[$m]}" >"$out" ;;
	*.ko.gz) gzip -dc "${MODULE_FILE[$m]}" >"$out" ;;
	*) cp "${MODULE_FILE[$m]}" "$out" ;;
	esac
	echo "$m.ko" >>"$2/modules.order"
}

# Fills $KERNEL_DIR with vmlinuz, the decompressed modules and modules.order (load order).
build_kernel_bundle() {
	local work=$KERNEL_DIR.tmp deb
	rm -rf "$work" && mkdir -p "$work/debs" "$work/root"
	local pkgs
	mapfile -t pkgs < <(kernel_debs)
	log "downloading ${pkgs[*]}"
	if ! (cd "$work/debs" && apt-get "${APT_OPTS[@]}" download -q "${pkgs[@]}" >/dev/null 2>&1); then
		# the archive moved on since our lists were fetched: refresh once and retry
		apt_update
		(cd "$work/debs" && apt-get "${APT_OPTS[@]}" download -q "${pkgs[@]}" >/dev/null 2>&1) ||
			die "apt-get download ${pkgs[*]} failed"
	fi
	for deb in "$work"/debs/*.deb; do
		dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work/root" --wildcards \
			'./boot/vmlinuz-*' './usr/lib/modules/*' './lib/modules/*' 2>/dev/null || true
	done
	local moddir
	moddir=$(find "$work/root" -mindepth 3 -maxdepth 4 -type d -path '*/lib/modules/*' | head -n 1)
	[ -n "$moddir" ] || die "no modules in ${pkgs[*]}"
	local kver=${moddir##*/}
	local vmlinuz=$moddir/vmlinuz
	[ -f "$vmlinuz" ] || vmlinuz=$work/root/boot/vmlinuz-$kver
	[ -f "$vmlinuz" ] || die "no vmlinuz in ${pkgs[*]}"

	# module name -> file; then each wanted module with its dependency closure
	local f name
	MODULE_FILE=() MODULE_DONE=()
	while IFS= read -r f; do
		name=${f##*/}; name=${name%%.ko*}; name=${name//-/_}
		MODULE_FILE[$name]=$f
	done < <(find "$moddir" -name '*.ko*')
	mkdir -p "$work/bundle/modules"
	: >"$work/bundle/modules.order"
	local m
	for m in "${GUEST_MODULES[@]}"; do bundle_module "$m" "$work/bundle"; done
	grep -qx 'rdma_rxe.ko' "$work/bundle/modules.order" || die "$KERNEL_PKG has no rdma_rxe module"
	if [ "$GUEST_ARCH" = arm64 ]; then
		arm64_kernel_image "$vmlinuz" "$work/bundle/vmlinuz"
	else
		cp "$vmlinuz" "$work/bundle/vmlinuz"
	fi
	echo "$kver" >"$work/bundle/kernel.release"
	echo "${GUEST_MODULES[*]}" >"$work/bundle/modules.wanted"
	rm -rf "$KERNEL_DIR" && mv "$work/bundle" "$KERNEL_DIR" && rm -rf "$work"
}

# Is package NAME in our package lists?
known_package() { apt-cache "${APT_OPTS[@]}" show "$1" >/dev/null 2>&1; }

prepare_kernel() {
	setup_private_apt
	if [ "$KERNEL_PKG" = latest ]; then
		KERNEL_PKG=
		KERNEL_PKG=$(resolve_kernel_pkg)
		if [ -z "$KERNEL_PKG" ]; then
			apt_update
			KERNEL_PKG=$(resolve_kernel_pkg)
		fi
		[ -n "$KERNEL_PKG" ] || die "cannot resolve linux-image-amd64 in ${KERNEL_SUITE}"
	fi
	KERNEL_DIR=$CACHE/kernel/$KERNEL_PKG
	if [ "$(cat "$KERNEL_DIR/modules.wanted" 2>/dev/null)" != "${GUEST_MODULES[*]}" ] &&
		! known_package "$KERNEL_PKG"; then
		apt_update
		if ! known_package "$KERNEL_PKG"; then
			[ "$KERNEL_PKG" = "$KERNEL_PKG_PINNED" ] ||
				die "$KERNEL_PKG is not in ${KERNEL_SUITE}: --kernel-pkg / SOFTROCE_VM_KERNEL_PKG names" \
					"a package the archive does not have"
			local newest
			newest=$(resolve_kernel_pkg)
			[ -n "$newest" ] || die "the pinned $KERNEL_PKG is not in ${KERNEL_SUITE} any more, and" \
				"linux-image-amd64 resolves to nothing there"
			log "WARNING: the pinned kernel $KERNEL_PKG is not in ${KERNEL_SUITE} any more; booting" \
				"the newest one instead, $newest (it must have rdma_rxe). Move the pin" \
				"(KERNEL_PKG_PINNED in scripts/softroce-vm.sh) as docs/softroce-vm.md says under" \
				"'Moving the kernel pin'"
			KERNEL_PKG=$newest
			KERNEL_DIR=$CACHE/kernel/$KERNEL_PKG
		fi
	fi
	mkdir -p "$CACHE/kernel"
	# one builder at a time; the others wait and then reuse the bundle
	exec 9>"$CACHE/kernel/.lock"
	flock 9
	if [ "$(cat "$KERNEL_DIR/modules.wanted" 2>/dev/null)" != "${GUEST_MODULES[*]}" ]; then
		local t
		t=$(now)
		build_kernel_bundle
		log "kernel bundle ready in $(since "$t")s: $KERNEL_DIR"
	fi
	flock -u 9
	exec 9>&-
	KERNEL_RELEASE=$(cat "$KERNEL_DIR/kernel.release")
}

# ---------------------------------------------------------------------------------------------
# 4. Initramfs
# ---------------------------------------------------------------------------------------------
ROOT=
declare -A COPIED=()

# Copies a host file to the same path in the guest (resolving symlinks; /bin, /lib... are
# symlinks into /usr in the guest as on the host).
put_file() { # src [dest]
	local src=$1 dest=${2:-$1}
	[ -n "$src" ] || die "put_file: empty path"
	dest=${dest#/}
	case "$dest" in bin/* | sbin/* | lib/* | lib64/*) dest=usr/$dest ;; esac
	[ -n "${COPIED[$dest]:-}" ] && return 0
	COPIED[$dest]=1
	mkdir -p "$ROOT/$(dirname "$dest")"
	rm -f "$ROOT/$dest"
	cp -L "$src" "$ROOT/$dest"
}

# Copies an ELF file and every library ldd reports for it.
put_elf() { # src [dest]
	local src=$1 lib libs
	put_file "$src" "${2:-$1}"
	libs=$(ldd "$src" 2>/dev/null) || return 0 # static
	while read -r lib; do
		[ -n "$lib" ] && put_file "$lib"
	done < <(awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }' <<<"$libs")
}

# The path of a shared library of the host (x86-64), e.g. host_library libibverbs.so.1.
host_library() { # soname
	local path
	path=$({ ldconfig -p || true; } | awk -v l="$1" '$1 == l && /x86-64/ { print $NF; exit }')
	[ -n "$path" ] || die "$1 is not in the host's ldconfig cache (ldconfig -p)"
	echo "$path"
}

# Programs for the guest. busybox supplies everything else, but busybox applets that run other
# programs (sh, timeout, env) prefer their own applets over PATH (busybox ip has no netns), so
# bash is /bin/sh and timeout/env/setsid come from coreutils/util-linux.
GUEST_PROGRAMS=(
	/bin/bash /usr/bin/timeout /usr/bin/env /usr/bin/setsid /usr/bin/nsenter
	/usr/bin/ip /usr/bin/rdma /usr/bin/ss
	/usr/bin/ibv_devices /usr/bin/ibv_devinfo
	/usr/bin/ib_send_bw /usr/bin/ib_send_lat
	/usr/bin/jq /usr/bin/strace
)

# podman (with conmon and runc), its configuration for a guest whose root is the initramfs, and
# the image as an OCI layout under /opt/oci.
put_container_runtime() {
	local p
	if [ "$GUEST_ARCH" = arm64 ]; then
		# in the arm64 user space (host-aarch64.sh's ARM64_CONTAINER_PACKAGES)
		for p in /usr/bin/podman /usr/bin/conmon /usr/sbin/runc /usr/bin/catatonit \
			/etc/containers/policy.json /usr/share/containers/seccomp.json; do
			[ -e "$ROOT$p" ] || die "$p is missing from the arm64 user space"
		done
	else
		for p in /usr/bin/podman /usr/bin/conmon /usr/sbin/runc /usr/bin/stat /usr/bin/catatonit; do
			put_elf "$p"
		done
		put_file /etc/containers/policy.json
		put_file /usr/share/containers/seccomp.json
	fi
	mkdir -p "$ROOT/etc/containers" "$ROOT/var/lib/containers" "$ROOT/var/tmp"
	# cgroupfs: there is no systemd; file: no journald; no_pivot_root: pivot_root(2) fails on an
	# initramfs root, so the runtime moves the root and chroots instead.
	cat >"$ROOT/etc/containers/containers.conf" <<-EOF
		[engine]
		cgroup_manager = "cgroupfs"
		events_logger = "file"
		no_pivot_root = true
		runtime = "runc"
	EOF
	cat >"$ROOT/etc/containers/storage.conf" <<-EOF
		[storage]
		driver = "overlay"
		graphroot = "/var/lib/containers/storage"
		runroot = "/run/containers/storage"
	EOF
	mkdir -p "$ROOT/opt"
	cp -r "$OCI" "$ROOT/opt/oci"
	# The shipped Kubernetes YAML as podman can play it (scripts/kube-play.py; its substitutions
	# in /opt/kube/plan): the device plugin's nodes are the namespace's rxe uverbs node and
	# rdma_cm, and the netdev in Multus' network-status is the namespace's veth; the guest puts
	# them in for @UVERBS@ and @NETDEV@. No memory limits: the guest runs podman on cgroup v1
	# (guest-container.sh says why), where its kernel has no memory controller.
	mkdir -p "$ROOT/opt/kube"
	/usr/bin/python3 "$SCRIPT_DIR/kube-play.py" --out "$ROOT/opt/kube" --play-dir /opt/kube \
		--device /dev/infiniband/@UVERBS@ --device /dev/infiniband/rdma_cm --interface @NETDEV@ --no-memory-limit \
		"$REPO_ROOT/deploy/kubernetes/shared/server.yaml" "$REPO_ROOT/deploy/kubernetes/shared/client.yaml" \
		>"$ROOT/opt/kube/plan.tmp" || die "scripts/kube-play.py failed"
	mv "$ROOT/opt/kube/plan.tmp" "$ROOT/opt/kube/plan"
}

# valgrind's callgrind for the lat-profile check: the launcher, the tool and what it loads.
put_callgrind() {
	local f
	[ -x /usr/bin/valgrind ] || die "the lat-profile check needs valgrind on the host (apt-get install valgrind)"
	put_elf /usr/bin/valgrind
	# Debian's valgrind is a wrapper script around valgrind.bin
	if [ -e /usr/bin/valgrind.bin ]; then put_elf /usr/bin/valgrind.bin; fi
	for f in callgrind-amd64-linux vgpreload_core-amd64-linux.so default.supp; do
		put_file "/usr/libexec/valgrind/$f"
	done
}

# The x86_64 guest's user space: the host's busybox, GUEST_PROGRAMS and the libraries they and
# rdma-container need.
put_userland_host() {
	cp /bin/busybox "$ROOT/usr/bin/busybox"
	for a in $(/bin/busybox --list); do
		[ -e "$ROOT/usr/bin/$a" ] || ln -s busybox "$ROOT/usr/bin/$a"
	done
	local p
	for p in "${GUEST_PROGRAMS[@]}"; do
		[ -e "$p" ] || die "$p is missing on the host"
		put_elf "$p"
	done
	ln -sf bash "$ROOT/usr/bin/sh"
	# libraries that are dlopen()ed, so that ldd does not list them: libgcc_s (by glibc, for
	# thread cancellation), rdma-core (by rdma-container), the rxe provider (by libibverbs)
	local lib
	for lib in libgcc_s.so.1 libibverbs.so.1 librdmacm.so.1; do
		lib=$(host_library "$lib") # (an assignment, so that a failure stops the script)
		put_elf "$lib"
	done
	for p in /usr/lib/*/libibverbs/librxe-rdmav*.so; do put_elf "$p"; done
	put_file /etc/libibverbs.d/rxe.driver
}

build_initramfs() {
	ROOT=$RUN_DIR/root
	local d a
	for d in usr/bin usr/sbin usr/lib usr/lib64 usr/local/bin etc/softroce-vm proc sys dev run tmp root var; do
		mkdir -p "$ROOT/$d"
	done
	for d in bin sbin lib lib64; do ln -s "usr/$d" "$ROOT/$d"; done
	ln -s ../run "$ROOT/var/run"
	chmod 1777 "$ROOT/tmp"

	if [ "$GUEST_ARCH" = arm64 ]; then
		put_userland_aarch64
	else
		put_userland_host
	fi
	printf 'root:x:0:0:root:/root:/bin/sh\n' >"$ROOT/etc/passwd"
	printf 'root:x:0:\n' >"$ROOT/etc/group"
	printf '127.0.0.1 localhost\n' >"$ROOT/etc/hosts"

	# the binary under test, its libraries, the kernel modules, the guest scripts
	if [ "$GUEST_ARCH" = arm64 ]; then
		put_file "$BINARY" /usr/local/bin/rdma-container # its libraries are in the user space
	else
		put_elf "$BINARY" /usr/local/bin/rdma-container
	fi
	# release builds carry debug info (28 MB); the guest does not need it
	strip --strip-debug "$ROOT/usr/local/bin/rdma-container" 2>/dev/null || true
	mkdir -p "$ROOT/usr/lib/modules/$KERNEL_RELEASE"
	cp "$KERNEL_DIR"/modules/*.ko "$KERNEL_DIR/modules.order" "$ROOT/usr/lib/modules/$KERNEL_RELEASE/"
	if want_check container; then put_container_runtime; fi
	if want_check lat-profile; then put_callgrind; fi
	if want_check lat-perf; then
		[ -x /usr/bin/perf ] || die "the lat-perf check needs perf on the host (apt-get install linux-perf)"
		put_elf /usr/bin/perf
	fi
	local exe suite_tests=""
	for exe in "${SUITE_EXES[@]}"; do
		put_elf "$exe" "$exe"
		# mostly debug info (release builds carry line tables; debug builds were 40-75 MB each,
		# and with it the initramfs was too large to unpack in the guest's memory)
		strip --strip-debug "$ROOT$exe" 2>/dev/null || true
		case "$exe" in */deps/*) suite_tests="$suite_tests $exe" ;; esac
	done
	if [ -n "$TRANSPORT_TEST_EXE" ]; then
		put_elf "$TRANSPORT_TEST_EXE" "$TRANSPORT_TEST_EXE"
		strip --strip-debug "$ROOT$TRANSPORT_TEST_EXE" 2>/dev/null || true
	fi
	if [ -n "$COMPARE_BINARY" ]; then
		put_elf "$COMPARE_BINARY" /usr/local/bin/rdma-container-compare
		strip --strip-debug "$ROOT/usr/local/bin/rdma-container-compare" 2>/dev/null || true
	fi
	if [ -n "$QP_PINGPONG" ]; then
		put_elf "$QP_PINGPONG" /usr/local/bin/qp-pingpong
		strip --strip-debug "$ROOT/usr/local/bin/qp-pingpong" 2>/dev/null || true
	fi
	if [ -n "$EVENT_LOOP_COST" ]; then
		put_elf "$EVENT_LOOP_COST" /usr/local/bin/event-loop-cost
		strip --strip-debug "$ROOT/usr/local/bin/event-loop-cost" 2>/dev/null || true
	fi
	if want_check rnr || want_check link-flap || want_check paths; then
		put_elf "$TEST_BINARY" /usr/local/bin/rdma-container-test-hooks
		strip --strip-debug "$ROOT/usr/local/bin/rdma-container-test-hooks" 2>/dev/null || true
	fi
	install -m 0755 "$GUEST_DIR/guest-init.sh" "$ROOT/init"
	install -m 0644 "$GUEST_DIR/guest-checks.sh" "$ROOT/etc/softroce-vm/checks.sh"
	install -m 0644 "$GUEST_DIR/guest-container.sh" "$ROOT/etc/softroce-vm/container.sh"
	cat >"$ROOT/etc/softroce-vm/config" <<-EOF
		TRANSPORT=$TRANSPORT
		CHECKS="${CHECKS//,/ }"
		SHELL_AT_END=$SHELL_AT_END
		T_RUN=$TRANSFER_TIMEOUT
		LAT_ROUNDS=$LAT_ROUNDS
		SUITE_TESTS="${suite_tests# }"
		TRANSPORT_TEST="$TRANSPORT_TEST_EXE"
	EOF

	INITRD=$RUN_DIR/initramfs.cpio
	(cd "$ROOT" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) >"$INITRD"
}

# ---------------------------------------------------------------------------------------------
# 5. Accelerator: KVM only when it can really boot our kernel
# ---------------------------------------------------------------------------------------------
# Some hosts have a /dev/kvm that cannot run an ordinary guest (e.g. kvm_pvm, which hides
# vmx/svm and runs only PVM-enlightened kernels: qemu aborts or the guest hangs). So: static
# checks first, then a short probe boot that must reach the kernel's first console line.
kvm_unusable_reason() {
	if [ ! -r /dev/kvm ] || [ ! -w /dev/kvm ]; then echo "no usable /dev/kvm"; return; fi
	grep -qwE 'vmx|svm' /proc/cpuinfo || { echo "CPU without vmx/svm"; return; }
	[ -d /sys/module/kvm_pvm ] && { echo "kvm_pvm (needs PVM guest kernels)"; return; }
	local out
	out=$(timeout 20 qemu-system-x86_64 -accel kvm -cpu host -m 256 -nodefaults -display none \
		-no-reboot -nic none -serial stdio -kernel "$KERNEL_DIR/vmlinuz" \
		-append 'console=ttyS0 panic=-1 earlyprintk=ttyS0' </dev/null 2>&1) || true
	grep -q 'Linux version' <<<"$out" || { echo "probe boot failed: $(tail -n 1 <<<"$out")"; return; }
}

choose_accel() {
	local why
	case "$ACCEL" in
	tcg) ACCEL_NOTE="tcg (requested)" ;;
	kvm) ACCEL_NOTE="kvm (requested)" ;;
	auto)
		why=$(kvm_unusable_reason)
		if [ -z "$why" ]; then ACCEL=kvm; ACCEL_NOTE="kvm"; else ACCEL=tcg; ACCEL_NOTE="tcg ($why)"; fi
		;;
	esac
	if [ "$GUEST_ARCH" = arm64 ]; then
		ACCEL_ARGS=(-machine virt -accel "tcg,thread=multi" -cpu max)
	elif [ "$ACCEL" = kvm ]; then
		ACCEL_ARGS=(-accel kvm -cpu host)
	else
		ACCEL_ARGS=(-accel "tcg,thread=multi" -cpu max)
	fi
}

# ---------------------------------------------------------------------------------------------
# 6. Boot and collect
# ---------------------------------------------------------------------------------------------
# Kernel command line. tsc=unstable: under multi-threaded TCG the kernel otherwise marks
# sched_clock stable ~3 s into the boot by patching code while the other vCPU runs, and QEMU
# now and then executes the stale int3 of that patch ("Oops: int3" in sched_clock_cpu).
KERNEL_CMDLINE="console=ttyS0 panic=-1 quiet loglevel=4 rdinit=/init tsc=unstable"

# Boots the VM once; the console goes to $CONSOLE (and stdout unless --quiet).
boot_vm() {
	local cmdline=$KERNEL_CMDLINE qemu_bin=qemu-system-x86_64
	if [ "$GUEST_ARCH" = arm64 ]; then
		qemu_bin=qemu-system-aarch64 cmdline="console=ttyAMA0 panic=-1 quiet loglevel=4 rdinit=/init"
	fi
	local qemu=("$qemu_bin" "${ACCEL_ARGS[@]}" -m "$MEM" -smp "$SMP"
		-nographic -no-reboot -nic none -serial mon:stdio
		-kernel "$KERNEL_DIR/vmlinuz" -initrd "$INITRD" -append "$cmdline")
	log "booting Linux $KERNEL_RELEASE with $ACCEL_NOTE, ${MEM} MiB, $SMP CPUs, timeout ${VM_TIMEOUT}s"
	# qemu's status is data here (124 = timed out), not an unexpected error
	trap - ERR
	set +e
	if [ "$SHELL_AT_END" = 1 ]; then
		timeout --foreground "$VM_TIMEOUT" "${qemu[@]}" 2>&1 | tee "$CONSOLE"
	elif [ "$QUIET" = 1 ]; then
		timeout "$VM_TIMEOUT" "${qemu[@]}" </dev/null >"$CONSOLE" 2>&1
	else
		timeout "$VM_TIMEOUT" "${qemu[@]}" </dev/null 2>&1 | tee "$CONSOLE"
	fi
	QEMU_STATUS=${PIPESTATUS[0]}
	set -e
	set_err_trap
	# the serial console has CRs and a few escape sequences
	tr -d '\r' <"$CONSOLE" | sed 's/\x1b\(\[[0-9;?]*[A-Za-z]\|c\)//g' >"$CONSOLE.txt"
	mv "$CONSOLE.txt" "$CONSOLE"
	if [ -n "$CONSOLE_COPY" ]; then cp "$CONSOLE" "$CONSOLE_COPY"; fi
}

# Prints the results and the benchmark table; returns the exit status. Every result the guest
# planned (SOFTROCE-PLAN) must be there: a missing one (VM hung or died) counts as a failure.
report() {
	local results plan name missing=()
	results=$(grep -E '^SOFTROCE-TEST ' "$CONSOLE" || true)
	plan=$(sed -n 's/^SOFTROCE-PLAN //p' "$CONSOLE" | head -n 1)
	for name in $plan; do
		grep -q "^SOFTROCE-TEST $name " <<<"$results" || missing+=("$name")
	done
	# A SKIP passes the verdict only where it is expected: rxe_traffic over --transport tcp
	# (the data does not cross rxe). Any other check that could not run fails the run.
	local skipped=() unexpected=()
	mapfile -t skipped < <(awk '$1 == "SOFTROCE-TEST" && $3 == "SKIP" { print $2 }' <<<"$results")
	for name in "${skipped[@]}"; do
		[ "$TRANSPORT" = tcp ] && [ "$name" = rxe_traffic ] && continue
		unexpected+=("$name")
	done
	echo
	echo "==== softroce-vm results (transport $TRANSPORT, $ACCEL_NOTE, Linux $KERNEL_RELEASE)"
	[ -n "$results" ] && printf '%s\n' "$results"
	for name in "${missing[@]}"; do
		echo "SOFTROCE-TEST $name FAIL no result: the VM stopped before this check finished"
	done
	if grep -q '^SOFTROCE-BENCH ' "$CONSOLE"; then
		echo
		echo "baseline: ours = rdma-container bench --transport $TRANSPORT, perftest on the same rxe device"
		{
			printf 'METRIC\tSIZE\tPERFTEST\tOURS\tOURS/PERFTEST\tUNIT\n'
			awk '/^SOFTROCE-BENCH / { print $2 "\t" $3 "\t" $4 "\t" $5 "\t" $6 "\t" $7 }' "$CONSOLE"
		} | column -t -s $'\t' | sed 's/^/  /'
		grep '^SOFTROCE-BENCH-NOTE ' "$CONSOLE" | sed 's/^SOFTROCE-BENCH-NOTE /  note: /' || true
	fi
	if grep -q '^SOFTROCE-SYSCALLS ' "$CONSOLE"; then
		echo
		echo "system calls per message in steady state (strace, 2 B messages):"
		grep '^SOFTROCE-SYSCALLS ' "$CONSOLE" | sed 's/^SOFTROCE-SYSCALLS /  /'
	fi
	echo
	local status=$EXIT_PASS verdict
	verdict=$(grep -m 1 '^SOFTROCE-RESULT ' "$CONSOLE" || true)
	if [ -z "$verdict" ] || [ -z "$plan" ]; then
		status=$EXIT_NO_RESULT
		if [ "$QEMU_STATUS" = 124 ]; then
			log "no result: the VM did not finish within ${VM_TIMEOUT}s"
		elif grep -qE 'Kernel panic|Oops:|BUG:' "$CONSOLE"; then
			log "no result: the guest kernel crashed: $(grep -m 1 -E 'Kernel panic|Oops:|BUG:' "$CONSOLE")"
		else
			log "no result: the VM stopped before the checks finished (qemu exit $QEMU_STATUS)"
		fi
		log "last console lines:"
		tail -n 15 "$CONSOLE" | sed 's/^/  | /' >&2
		verdict="SOFTROCE-RESULT FAIL no result from the VM"
	elif [[ "$verdict" != "SOFTROCE-RESULT PASS"* ]] || [ ${#missing[@]} -gt 0 ] || [ ${#unexpected[@]} -gt 0 ]; then
		status=$EXIT_FAIL
		verdict="SOFTROCE-RESULT FAIL ${verdict#SOFTROCE-RESULT * }${missing[*]:+; missing: ${missing[*]}}${unexpected[*]:+; skipped, which only rxe_traffic over tcp may: ${unexpected[*]}}"
	fi
	echo "$verdict"
	log "console log: $CONSOLE"
	log "VM ran $(since "$T_BOOT")s (qemu exit $QEMU_STATUS); total $(since "$T_START")s"
	return "$status"
}

# Keeps the console logs of the newest runs; the staging tree and the initramfs go away.
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	if [ -n "${RUN_DIR:-}" ]; then rm -rf "$RUN_DIR/root" "$RUN_DIR/initramfs.cpio"; fi
	find "$CACHE/runs" -mindepth 1 -maxdepth 1 -type d -printf '%T@ %p\n' 2>/dev/null |
		sort -rn | tail -n +$((RUN_KEEP + 1)) | cut -d' ' -f2- | xargs -r rm -rf
}

main() {
	parse_args "$@"
	T_START=$(now)
	mkdir -p "$CACHE/runs"
	ensure_host_packages
	if [ "$PREPARE_KERNEL_ONLY" = 1 ]; then
		prepare_kernel
		log "kernel $KERNEL_PKG ($KERNEL_RELEASE) ready (cache $CACHE)"
		echo "kernel $KERNEL_PKG"
		exit 0
	fi
	prepare_binary
	prepare_test_binary
	prepare_suite
	prepare_transport_tests
	prepare_oci

	local t
	t=$(now)
	prepare_kernel
	log "kernel $KERNEL_PKG ($KERNEL_RELEASE) ready in $(since "$t")s (cache $CACHE)"

	RUN_DIR=$(mktemp -d "$CACHE/runs/$(date +%Y%m%d-%H%M%S).XXXX")
	trap cleanup EXIT
	t=$(now)
	build_initramfs
	log "initramfs $(du -h "$INITRD" | cut -f1) built in $(since "$t")s"

	choose_accel
	T_BOOT=$(now)
	CONSOLE=$RUN_DIR/console.log
	boot_vm
	# A guest kernel crash without a result is retried once: TCG has rare races of its own.
	# (A crash that our traffic causes in rdma_rxe comes back the second time and is reported.)
	# Only when a second boot as long as the first still fits in --timeout (counted from the
	# start of this script): a slow host that used its time up reports the crash instead.
	if ! grep -q '^SOFTROCE-RESULT ' "$CONSOLE" && grep -qE 'Kernel panic|Oops:|BUG:' "$CONSOLE"; then
		mv "$CONSOLE" "$RUN_DIR/console.crashed.log"
		log "the guest kernel crashed: $(grep -m 1 -E 'Kernel panic|Oops:|BUG:' "$RUN_DIR/console.crashed.log")"
		local used first left
		used=$(awk -v a="$T_START" -v b="$(now)" 'BEGIN { printf "%d", b - a }')
		first=$(awk -v a="$T_BOOT" -v b="$(now)" 'BEGIN { printf "%d", b - a }')
		left=$((VM_TIMEOUT - used))
		if [ "$left" -gt $((first + first / 5)) ]; then
			log "booting once more (console of the crashed boot: $RUN_DIR/console.crashed.log; ${left}s of --timeout left)"
			VM_TIMEOUT=$left
			T_BOOT=$(now)
			boot_vm
		else
			log "no second boot: ${left}s of --timeout left, the first boot took ${first}s"
		fi
	fi
	local status=0
	report || status=$?
	exit "$status"
}

main "$@"
