# shellcheck shell=bash
# The aarch64 guest of scripts/softroce-vm.sh (--arch aarch64), sourced by it: what differs from
# the x86_64 guest. The guest is qemu-system-aarch64 (machine virt, TCG: no KVM for another
# architecture), an arm64 Debian kernel with rdma_rxe, and an arm64 user space taken from Debian
# arm64 packages (the x86_64 guest copies the host's programs instead). The guest scripts are
# the same.

# Debian arm64 packages of the guest's user space: what GUEST_PROGRAMS and the x86_64 guest's
# libraries come from there, and busybox for the rest.
ARM64_PACKAGES=(busybox-static bash coreutils util-linux iproute2 libibverbs1 librdmacm1
	ibverbs-providers ibverbs-utils perftest jq strace libgcc-s1)
# With the container check: podman and what it runs (the x86_64 guest copies the host's).
ARM64_CONTAINER_PACKAGES=(podman conmon runc catatonit golang-github-containers-common)

# The aarch64 binary under test: --binary, or dist/aarch64/rdma-container from
# scripts/build-aarch64.sh (built here when missing). It cannot run on this host.
prepare_binary_aarch64() {
	if [ -z "$BINARY" ]; then
		BINARY=$REPO_ROOT/dist/aarch64/rdma-container
		if [ ! -x "$BINARY" ]; then
			log "building the aarch64 binary (scripts/build-aarch64.sh --no-tests)"
			"$SCRIPT_DIR/build-aarch64.sh" --no-tests >&2 || die "scripts/build-aarch64.sh failed"
		fi
	fi
	[ -x "$BINARY" ] || die "no executable binary at $BINARY"
	BINARY=$(cd "$(dirname "$BINARY")" && pwd)/$(basename "$BINARY")
	local kind
	kind=$(file -b "$BINARY")
	[[ "$kind" == *"ARM aarch64"* ]] || die "$BINARY is not an aarch64 binary: $kind"
	log "binary: $BINARY (aarch64)"
}

# The arm64 packages, extracted (no maintainer scripts, so no emulation) into a tree cached per
# package list and week: $ARM64_TREE.
arm64_userland() {
	local key week mirror
	week=$(date +%G-w%V)
	if want_check container; then ARM64_PACKAGES+=("${ARM64_CONTAINER_PACKAGES[@]}"); fi
	key=$(printf '%s\n' "${ARM64_PACKAGES[@]}" | sha256sum | cut -c1-12)
	ARM64_TREE=$CACHE/arm64-userland/$key-$week
	[ -x "$ARM64_TREE/usr/bin/bash" ] && return 0
	mirror=${SOFTROCE_VM_MIRROR:-$(host_debian_mirror)}
	[ -n "$mirror" ] || die "no Debian archive in the host's apt sources; set SOFTROCE_VM_MIRROR"
	log "extracting the arm64 user space (${ARM64_PACKAGES[*]}) from bookworm, $mirror"
	mkdir -p "$CACHE/arm64-userland"
	rm -rf "$ARM64_TREE.tmp"
	as_root mmdebstrap --variant=extract --mode=root --architectures=arm64 --quiet \
		--include="$(IFS=,; echo "${ARM64_PACKAGES[*]}")" \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		bookworm "$ARM64_TREE.tmp" "deb $mirror bookworm main" >"$CACHE/arm64-userland/mmdebstrap.log" 2>&1 ||
		{ tail -n 20 "$CACHE/arm64-userland/mmdebstrap.log" >&2; die "mmdebstrap (arm64, extract) failed"; }
	mv "$ARM64_TREE.tmp" "$ARM64_TREE"
	# the trees of other weeks (those of the other package list stay: with and without podman)
	find "$CACHE/arm64-userland" -mindepth 1 -maxdepth 1 -type d ! -name "*-$week" -exec rm -rf {} +
}

# The guest's user space from $ARM64_TREE: every file of those packages (a few tens of MB; the
# x86_64 guest picks single programs, which needs ldd for the guest's architecture), busybox's
# applets where no package provides the command, the rxe provider's driver file.
put_userland_aarch64() {
	arm64_userland
	local a
	(cd "$ARM64_TREE" && tar -c --exclude=./dev --exclude=./proc --exclude=./sys --exclude=./var/cache \
		--exclude=./var/lib/apt --exclude=./usr/share/doc --exclude=./usr/share/man .) |
		tar -x -C "$ROOT" --keep-directory-symlink
	[ -x "$ROOT/usr/bin/busybox" ] || cp "$ROOT/bin/busybox" "$ROOT/usr/bin/busybox" 2>/dev/null || true
	[ -x "$ROOT/usr/bin/busybox" ] || die "no busybox in the arm64 user space"
	# busybox lists its applets when run; here it cannot run, so the list is the host's
	# busybox-static of the same release (the same applets)
	for a in $(/bin/busybox --list); do
		[ -e "$ROOT/usr/bin/$a" ] || [ -e "$ROOT/usr/sbin/$a" ] || ln -s busybox "$ROOT/usr/bin/$a"
	done
	ln -sf bash "$ROOT/usr/bin/sh"
}

# Debian's arm64 vmlinuz is an EFI "zboot" image (a PE/COFF wrapper around the compressed
# kernel) or a gzip-compressed Image; qemu's -kernel wants the Image. Writes it to $2.
arm64_kernel_image() { # vmlinuz out
	local magic
	magic=$(head -c 8 "$1" | od -An -c | tr -d ' \n')
	if [ "${magic:4:4}" = zimg ]; then
		# zboot header: "MZ", 2 bytes, "zimg", payload offset (le32), size (le32), 8 bytes,
		# then the compression's name (NUL-padded)
		local off size comp
		off=$(od -An -t u4 -j 8 -N 4 "$1" | tr -d ' ')
		size=$(od -An -t u4 -j 12 -N 4 "$1" | tr -d ' ')
		comp=$(dd if="$1" bs=1 skip=24 count=8 2>/dev/null | tr -d '\0')
		case "$comp" in
		gzip) tail -c +$((off + 1)) "$1" | head -c "$size" | gzip -dc >"$2" ;;
		zstd | zstd22) tail -c +$((off + 1)) "$1" | head -c "$size" | zstd -qdc >"$2" ;;
		xz) tail -c +$((off + 1)) "$1" | head -c "$size" | xz -dc >"$2" ;;
		*) die "unknown zboot compression '$comp' in $1" ;;
		esac
	elif [ "$(head -c 2 "$1" | od -An -t x1 | tr -d ' ')" = 1f8b ]; then
		gzip -dc "$1" >"$2"
	else
		cp "$1" "$2"
	fi
}
