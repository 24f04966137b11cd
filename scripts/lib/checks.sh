# shellcheck shell=bash
# What the check scripts (scripts/container-test.sh, scripts/build-aarch64.sh) share: each
# check prints one line "$RESULT_PREFIX <name> PASS|FAIL detail", counted in PASSED and
# PLANNED for the script's last line; a failed check shows the end of its logs.

PLANNED=0 PASSED=0

result() { # name PASS|FAIL detail...
	local name=$1 status=$2
	shift 2
	PLANNED=$((PLANNED + 1))
	[ "$status" = PASS ] && PASSED=$((PASSED + 1))
	echo "$RESULT_PREFIX $name $status${*:+ $*}"
}

# The last SHOW_LINES lines (default 25) of each file that is not empty, indented, on stderr.
show() { # file...
	local f
	for f in "$@"; do
		[ -s "$f" ] || continue
		echo "  == ${f##*/}" >&2
		tail -n "${SHOW_LINES:-25}" "$f" | sed 's/^/  | /' >&2
	done
}

# Installs the Debian packages named (those a check found missing) with apt, as root; dies
# (the script's `die`) when it cannot.
install_missing() { # package...
	[ $# -eq 0 ] && return 0
	[ "$(id -u)" = 0 ] || die "missing packages: $* (and not root to install them)"
	log "installing $*"
	apt-get update -qq >/dev/null || die "apt-get update failed"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
		>/dev/null || die "apt-get install $* failed"
}
