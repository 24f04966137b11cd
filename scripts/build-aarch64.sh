#!/usr/bin/env bash
# build-aarch64.sh: cross-builds rdma-container for aarch64 (BlueField's Arm cores) on this
# x86_64 host, without a registry and without touching the host's toolchain, and runs its tests
# under emulation.
#
#   1. makes (once, cached outside the clone) a Debian trixie chroot with mmdebstrap holding
#      Debian's Rust (rustc-web/cargo-web 1.96, with libstd-rust-web-dev:arm64 of the same
#      version: Debian's Rust cross-compiles to Debian architectures through multiarch), the
#      aarch64 cross gcc, the arm64 libc, libibverbs-dev:arm64 and qemu-user;
#   2. cross-builds the release binary (default features: verbs and tcp; DOCA stays out, as in
#      the roce image) into dist/aarch64/rdma-container, checks it is an aarch64 ELF whose
#      highest GLIBC_ symbol version is at most 2.35 (Ubuntu 22.04, the oldest OS NVIDIA ships
#      for BlueField with DOCA 3.x), and runs it under qemu-aarch64 (--version, demo);
#   3. with --tests (the default; --no-tests skips it): the unit and property tests, the
#      cycle counter, the verbs ABI check against the arm64 rdma-core headers and the tcp
#      process tests, as aarch64 binaries under qemu-aarch64 (a cargo runner; the binary the
#      process tests start goes through RDMA_TEST_RUNNER).
#
# Every check prints "AARCH64-TEST <name> PASS|FAIL detail"; the last line is
# "AARCH64-RESULT PASS|FAIL <passed>/<planned>". Run with --help for the options.
set -Eeuo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
PROG=build-aarch64
readonly EXIT_PASS=0 EXIT_FAIL=1 EXIT_USAGE=2 EXIT_SETUP=3

CACHE=${AARCH64_CACHE:-${HOME:-/root}/.cache/rdma-container/aarch64}
TARGET=aarch64-unknown-linux-gnu
GLIBC_MAX=2.35
TESTS=1
TEST_CHECKS=unit,abi,process
TOOLCHAIN_ONLY=0
OUT=$REPO_ROOT/dist/aarch64
MIRROR=${AARCH64_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${AARCH64_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
# The process tests over tcp: the CLI's sessions, admission, rules, checksums, resumption.
PROCESS_TESTS=(process sessions session rules checksum resume json_outputs cli_flags)
# Under qemu-user a process runs several times slower: every test bound is scaled by 4 on top
# of the caller's RDMA_TEST_TIME_SCALE (a slow host's).
TIME_SCALE=$((${RDMA_TEST_TIME_SCALE:-1} * 4))

# What the chroot holds; its hash names the chroot, so a change here makes a new one.
PACKAGES=(gcc libc6-dev pkg-config ca-certificates file
	gcc-aarch64-linux-gnu libc6-dev-arm64-cross binutils-aarch64-linux-gnu
	libc6:arm64 libgcc-s1:arm64 libibverbs-dev:arm64 qemu-user iproute2 python3-jsonschema
	rustc-web cargo-web libstd-rust-web-dev:arm64)

usage() {
	cat <<EOF
Usage: scripts/build-aarch64.sh [options]

Cross-builds the rdma-container release binary for $TARGET in a Debian trixie chroot
(Debian's Rust with the arm64 standard library; nothing on the host changes but the cache) and
runs its tests under qemu-aarch64.

Checks (each prints "AARCH64-TEST <name> PASS|FAIL detail"):
  toolchain  the chroot: rustc and cargo, the arm64 standard library of the same version
  build      cargo build --release --locked --target $TARGET (default features) into
             dist/aarch64/rdma-container (stripped of debug information)
  elf        an aarch64 ELF whose highest GLIBC_ symbol version is at most $GLIBC_MAX
  run        under qemu-aarch64: --version names the version of Cargo.toml; demo passes
             10,000 messages in order
  unit       (--tests) cargo test --release --lib of the library (its unit and property
             tests) and of cycles-sys (the aarch64 cycle counter, CNTVCT_EL0 at the rate
             CNTFRQ_EL0 states), under qemu-aarch64
  abi        (--tests) verbs-sys' ABI conformance against the arm64 rdma-core headers
             (libibverbs-dev:arm64, compiled with aarch64-linux-gnu-gcc), never skipped
  process    (--tests) the tcp process tests (tests/{$(
		IFS=,
		echo "${PROCESS_TESTS[*]}"
	)}.rs)
             with RDMA_TEST_TRANSPORT=tcp and RDMA_TEST_TIME_SCALE=$TIME_SCALE

Options:
  --no-tests     build and check the binary only
  --checks LIST  which of unit,abi,process to run (default all three)
  --toolchain-only
                 make the chroot and check the toolchain, nothing else
  --out DIR      where the binary goes (default dist/aarch64)
  -h, --help     this text

Environment:
  AARCH64_CACHE           the cache (default ~/.cache/rdma-container/aarch64): the chroot
                          (about 2.5 GB), cargo's home and the target directory
  AARCH64_MIRROR          the Debian archive (default $MIRROR)
  AARCH64_SECURITY_MIRROR the security archive (default $SECURITY_MIRROR)
  RDMA_TEST_TIME_SCALE    a slow host's bound scale; the tests under emulation get 4 times it

Exit status: 0 every check passed, 1 a check failed, 2 usage, 3 setup (the chroot could not
be made).
EOF
}

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { log "error: $*"; exit "$EXIT_SETUP"; }

RESULT_PREFIX=AARCH64-TEST SHOW_LINES=40
# shellcheck source=scripts/lib/checks.sh
. "$SCRIPT_DIR/lib/checks.sh"

parse_args() {
	while [ $# -gt 0 ]; do
		case "$1" in
		--no-tests) TESTS=0; shift ;;
		--toolchain-only) TOOLCHAIN_ONLY=1; shift ;;
		--tests) TESTS=1; shift ;;
		--checks) [ $# -ge 2 ] || { log "--checks needs a list"; exit "$EXIT_USAGE"; }; TEST_CHECKS=$2; shift 2 ;;
		--out) [ $# -ge 2 ] || { log "--out needs a directory"; exit "$EXIT_USAGE"; }; OUT=$2; shift 2 ;;
		-h | --help) usage; exit 0 ;;
		*) log "unknown option: $1 (try --help)"; exit "$EXIT_USAGE" ;;
		esac
	done
}

# ---------------------------------------------------------------------------------------------
# The chroot
# ---------------------------------------------------------------------------------------------
ensure_host_tools() {
	local missing=()
	command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
	command -v unshare >/dev/null || missing+=(util-linux)
	install_missing "${missing[@]}"
}

make_chroot() {
	local key
	key=$(printf '%s\n' "${PACKAGES[@]}" "$MIRROR" | sha256sum | cut -c1-12)
	ROOT=$CACHE/trixie-$key
	if [ -x "$ROOT/usr/bin/cargo" ]; then
		log "chroot $ROOT (cached)"
		return 0
	fi
	[ "$(id -u)" = 0 ] || die "making the chroot needs root (mmdebstrap --mode=root)"
	mkdir -p "$CACHE"
	rm -rf "$ROOT.tmp"
	log "making the trixie chroot with mmdebstrap (amd64 + arm64; $MIRROR): a few minutes"
	local t=$SECONDS packages
	packages=$(IFS=,; echo "${PACKAGES[*]}")
	if ! mmdebstrap --variant=minbase --mode=root --architectures=amd64,arm64 --quiet \
		--include="$packages" \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
		trixie "$ROOT.tmp" "deb $MIRROR trixie main" "deb $MIRROR trixie-updates main" \
		"deb $SECURITY_MIRROR trixie-security main" >"$WORK/mmdebstrap.log" 2>&1; then
		show "$WORK/mmdebstrap.log"
		rm -rf "$ROOT.tmp"
		die "mmdebstrap failed"
	fi
	mv "$ROOT.tmp" "$ROOT"
	# chroots made for another package list
	find "$CACHE" -maxdepth 1 -name 'trixie-*' ! -name "${ROOT##*/}" -exec rm -rf {} +
	log "chroot $(du -sh "$ROOT" | cut -f1) in $((SECONDS - t))s"
}

# Runs a bash command line in the chroot, in a mount namespace of its own (the mounts go with
# it): /proc, /dev, /sys, /tmp; the repository at /src, the target directory at /target,
# cargo's home at /cargo (its registry shared with the host's, so crates download once).
in_chroot() { # command-line
	local host_registry=${CARGO_HOME:-${HOME:-/root}/.cargo}/registry
	mkdir -p "$CACHE/target" "$CACHE/cargo/registry" "$host_registry"
	# shellcheck disable=SC2016 # expanded by the inner shell
	unshare --mount --propagation private -- bash -c '
		set -e
		r=$1 repo=$2 cache=$3 registry=$4
		shift 4
		mkdir -p "$r/src" "$r/target" "$r/cargo"
		mount -t proc proc "$r/proc"
		mount --rbind /dev "$r/dev"
		mount --rbind /sys "$r/sys"
		mount -t tmpfs tmpfs "$r/tmp"
		mount --bind "$repo" "$r/src"
		mount --bind "$cache/target" "$r/target"
		mount --bind "$cache/cargo" "$r/cargo"
		mount --bind "$registry" "$r/cargo/registry"
		cp /etc/resolv.conf "$r/etc/resolv.conf"
		# mmdebstrap leaves no /etc/hosts; the tests resolve localhost
		[ -s "$r/etc/hosts" ] || printf "127.0.0.1 localhost\n::1 localhost ip6-localhost\n" >"$r/etc/hosts"
		exec chroot "$r" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin \
			CARGO_HOME=/cargo CARGO_TARGET_DIR=/target \
			CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
			CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER=qemu-aarch64 \
			CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
			AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar \
			bash -c "cd /src && $1"
	' sh "$ROOT" "$REPO_ROOT" "$CACHE" "$host_registry" "$1"
}

# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------
check_toolchain() {
	if in_chroot 'rustc --version && cargo --version && ls /usr/lib/rustlib/aarch64-unknown-linux-gnu/lib | grep -m1 "^libstd-"' \
		>"$WORK/toolchain.out" 2>&1; then
		result toolchain PASS "$(head -n 1 "$WORK/toolchain.out"); arm64 std: $(tail -n 1 "$WORK/toolchain.out")"
	else
		show "$WORK/toolchain.out"
		result toolchain FAIL "rustc, cargo or the arm64 standard library missing in the chroot"
		return 1
	fi
}

check_build() {
	local t=$SECONDS
	if ! in_chroot "cargo build --release --locked --target $TARGET -p rdma-container-cli" \
		>"$WORK/build.log" 2>&1; then
		show "$WORK/build.log"
		result build FAIL "cargo build --target $TARGET failed (log above)"
		return 1
	fi
	mkdir -p "$OUT"
	if ! in_chroot "aarch64-linux-gnu-strip --strip-debug -o /target/rdma-container-aarch64 \
		/target/$TARGET/release/rdma-container" >"$WORK/strip.log" 2>&1 ||
		! cp "$CACHE/target/rdma-container-aarch64" "$OUT/rdma-container"; then
		show "$WORK/strip.log"
		result build FAIL "aarch64-linux-gnu-strip or the copy to $OUT failed"
		return 1
	fi
	result build PASS "$OUT/rdma-container, $(du -h "$OUT/rdma-container" | cut -f1) in $((SECONDS - t))s"
}

check_elf() {
	local kind newest
	kind=$(in_chroot 'file -b /target/rdma-container-aarch64')
	in_chroot 'aarch64-linux-gnu-objdump -T /target/rdma-container-aarch64' >"$WORK/dynsym.txt" 2>&1
	newest=$(grep -oE 'GLIBC_[0-9]+(\.[0-9]+)+' "$WORK/dynsym.txt" | sed 's/GLIBC_//' | sort -uV | tail -n 1)
	if [[ "$kind" != *"ARM aarch64"* ]]; then
		result elf FAIL "not an aarch64 ELF: $kind"
	elif [ -z "$newest" ]; then
		result elf FAIL "no GLIBC_ symbol versions found"
	elif [ "$(printf '%s\n%s\n' "$newest" "$GLIBC_MAX" | sort -V | tail -n 1)" != "$GLIBC_MAX" ]; then
		grep "GLIBC_$newest" "$WORK/dynsym.txt" | sed 's/^/  | /' >&2
		result elf FAIL "needs GLIBC_$newest, newer than $GLIBC_MAX (Ubuntu 22.04): the symbols above"
	else
		result elf PASS "${kind%%, BuildID*}; highest symbol version GLIBC_$newest (at most $GLIBC_MAX)"
	fi
}

check_run() {
	local version
	version=$(awk -F'"' '/^\[package\]/ { p = 1; next } /^\[/ { p = 0 } p && /^version *=/ { print $2; exit }' \
		"$REPO_ROOT/Cargo.toml")
	# the stripped binary, from inside the chroot (its arm64 libc), under qemu-aarch64
	if ! in_chroot 'qemu-aarch64 /target/rdma-container-aarch64 --version' >"$WORK/version.out" 2>&1 ||
		[ "$(head -n 1 "$WORK/version.out")" != "rdma-container $version" ]; then
		show "$WORK/version.out"
		result run FAIL "--version under qemu-aarch64 (expected rdma-container $version)"
		return 0
	fi
	if in_chroot 'qemu-aarch64 /target/rdma-container-aarch64 demo' >"$WORK/demo.out" 2>"$WORK/demo.err" &&
		seq 0 9999 | cmp -s - "$WORK/demo.out"; then
		result run PASS "qemu-aarch64: $(head -n 1 "$WORK/version.out"), $(sed -n 2p "$WORK/version.out"); demo: 10,000 messages in order"
	else
		show "$WORK/demo.err"
		result run FAIL "demo under qemu-aarch64: $(wc -l <"$WORK/demo.out") lines, expected seq 0 9999"
	fi
}

# cargo test in the chroot, as aarch64 binaries under qemu-aarch64; prints the summary.
cross_test() { # name cargo-test-arguments
	local name=$1 t=$SECONDS
	if in_chroot "RDMA_TEST_STRICT=1 RDMA_TEST_RUNNER=qemu-aarch64 RDMA_TEST_TIME_SCALE=$TIME_SCALE \
		RDMA_TEST_TRANSPORT=tcp CC=aarch64-linux-gnu-gcc CC_x86_64_unknown_linux_gnu=gcc \
		cargo test --release --locked --no-fail-fast --target $TARGET $2" >"$WORK/$name.log" 2>&1; then
		TEST_DETAIL="$(grep -c '^test .* ok$' "$WORK/$name.log") tests passed in $((SECONDS - t))s"
		return 0
	fi
	# each failing test's own output, then the end of the log; the whole log stays in the cache
	awk '/^---- .* stdout ----$/ { p = 1 } /^failures:$/ { p = 0 } p' "$WORK/$name.log" | head -n 200 | sed 's/^/  | /' >&2
	show "$WORK/$name.log"
	cp "$WORK/$name.log" "$CACHE/last-$name.log"
	log "the whole log: $CACHE/last-$name.log"
	TEST_DETAIL="$(grep -E '^test .* FAILED$' "$WORK/$name.log" | head -n 5 | tr '\n' ' ')(log above)"
	return 1
}

check_unit() {
	if cross_test unit "-p rdma-container --lib -p cycles-sys"; then
		result unit PASS "library (unit and property tests) and cycles-sys: $TEST_DETAIL"
	else
		result unit FAIL "$TEST_DETAIL"
	fi
}

check_abi() {
	if cross_test abi "-p verbs-sys --test conformance -- --nocapture" &&
		! grep -q 'skipped' "$WORK/abi.log"; then
		result abi PASS "verbs-sys against /usr/include/infiniband/verbs.h of libibverbs-dev:arm64 with aarch64-linux-gnu-gcc: $TEST_DETAIL"
	else
		result abi FAIL "$TEST_DETAIL"
	fi
}

check_process() {
	local args="-p rdma-container-cli" t
	for t in "${PROCESS_TESTS[@]}"; do args="$args --test $t"; done
	if cross_test process "$args"; then
		result process PASS "tests/{$(IFS=,; echo "${PROCESS_TESTS[*]}")}.rs over tcp: $TEST_DETAIL"
	else
		result process FAIL "$TEST_DETAIL"
	fi
}

main() {
	parse_args "$@"
	local t0=$SECONDS
	WORK=$(mktemp -d)
	trap 'rm -rf "$WORK"' EXIT
	ensure_host_tools
	make_chroot
	if check_toolchain && [ "$TOOLCHAIN_ONLY" = 0 ] && check_build; then
		check_elf
		check_run
		if [ "$TESTS" = 1 ]; then
			[[ ",$TEST_CHECKS," != *,unit,* ]] || check_unit
			[[ ",$TEST_CHECKS," != *,abi,* ]] || check_abi
			[[ ",$TEST_CHECKS," != *,process,* ]] || check_process
		fi
	fi
	local verdict=PASS status=$EXIT_PASS
	if [ "$PASSED" != "$PLANNED" ] || [ "$PLANNED" = 0 ]; then verdict=FAIL status=$EXIT_FAIL; fi
	log "$((SECONDS - t0))s in all"
	echo "AARCH64-RESULT $verdict $PASSED/$PLANNED"
	return "$status"
}

main "$@"
