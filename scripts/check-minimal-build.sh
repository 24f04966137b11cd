#!/usr/bin/env bash
# Proves that the default build needs nothing beyond cargo and a C compiler: in a private mount
# namespace, cmake, clang and libclang (and the rdma-core headers) are hidden by bind-mounting
# empty files/directories over them; then `cargo build --release --locked` runs from scratch
# (its own CARGO_TARGET_DIR), and the binary's `demo` must print its 10,000 messages.
#
# Usage: scripts/check-minimal-build.sh            (as root: unshare --mount needs it)
# Env:   MINIMAL_BUILD_TARGET_DIR  target directory (default: target/minimal-build)
#        MINIMAL_BUILD_KEEP=1      keep the target directory (a later run is then incremental)
#
# Prints what it hid, the build time and one line `MINIMAL-BUILD PASS|FAIL ...`.
set -euo pipefail

cd "$(dirname "$0")/.."
repo=$(pwd)
target=${MINIMAL_BUILD_TARGET_DIR:-$repo/target/minimal-build}

if [ "${1:-}" != "--inside" ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "MINIMAL-BUILD FAIL needs root (unshare --mount)" >&2
		exit 1
	fi
	command -v unshare >/dev/null || { echo "MINIMAL-BUILD FAIL unshare (util-linux) missing" >&2; exit 1; }
	if [ "${MINIMAL_BUILD_KEEP:-0}" != 1 ]; then
		rm -rf "$target"
	fi
	exec unshare --mount --propagation private -- "$repo/scripts/$(basename "$0")" --inside
fi

# ---- inside the private mount namespace ----
empty_dir=$(mktemp -d /tmp/minimal-build-empty.XXXXXX)
empty_file="$empty_dir/.empty"
: >"$empty_file"
chmod 000 "$empty_file"
hidden=()
hide() {
	local path=$1
	[ -e "$path" ] || return 0
	if [ -d "$path" ] && [ ! -L "$path" ]; then
		mount --bind "$empty_dir" "$path"
	else
		# A symlink is resolved by mount: hide its target too (and the link name stays dead).
		mount --bind "$empty_file" "$path"
	fi
	hidden+=("$path")
}

shopt -s nullglob
for p in /usr/bin/cmake /usr/local/bin/cmake /usr/bin/ctest /usr/bin/cpack \
	/usr/bin/clang /usr/bin/clang-[0-9]* /usr/bin/clang++ /usr/bin/clang++-[0-9]* \
	/usr/local/bin/clang /usr/bin/llvm-config* \
	/usr/lib/llvm-* /usr/lib/x86_64-linux-gnu/libclang* /usr/lib/aarch64-linux-gnu/libclang* \
	/usr/lib64/libclang* /usr/local/lib/libclang* \
	/usr/include/infiniband /usr/include/rdma; do
	hide "$p"
done
shopt -u nullglob

echo "minimal build: hidden in this mount namespace: ${hidden[*]:-(nothing was installed)}"
for tool in cmake clang; do
	if command -v "$tool" >/dev/null 2>&1 && "$tool" --version >/dev/null 2>&1; then
		echo "MINIMAL-BUILD FAIL $tool still runs at $(command -v "$tool")"
		exit 1
	fi
done
shopt -s nullglob
for lib in /usr/lib/*/libclang*.so* /usr/lib/llvm-*/lib/libclang*.so* /usr/lib64/libclang*.so*; do
	if [ -s "$lib" ]; then
		echo "MINIMAL-BUILD FAIL libclang still visible at $lib"
		exit 1
	fi
done
shopt -u nullglob
echo "minimal build: cmake, clang, libclang and the rdma-core headers are unavailable; cc is $(command -v cc || echo missing)"

started=$(date +%s)
if ! CARGO_TARGET_DIR="$target" LIBCLANG_PATH=/nonexistent cargo build --release --locked; then
	echo "MINIMAL-BUILD FAIL cargo build --release --locked failed without cmake/clang/libclang (hidden: ${hidden[*]:-nothing})"
	exit 1
fi
built=$(( $(date +%s) - started ))

out=$(mktemp /tmp/minimal-build-demo.XXXXXX)
if ! "$target/release/rdma-container" demo >"$out" 2>"$out.err"; then
	echo "MINIMAL-BUILD FAIL demo exited non-zero:"
	tail -n 20 "$out.err"
	exit 1
fi
lines=$(wc -l <"$out")
rm -f "$out" "$out.err"
if [ "$lines" -ne 10000 ]; then
	echo "MINIMAL-BUILD FAIL demo printed $lines messages, expected 10000"
	exit 1
fi
echo "MINIMAL-BUILD PASS cargo build --release --locked in ${built}s with cmake, clang and libclang hidden (${#hidden[@]} paths); demo printed 10000 messages"
