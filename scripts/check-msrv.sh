#!/usr/bin/env bash
# Checks that `rust-version` in Cargo.toml is at least what every locked dependency declares
# (the dependencies of Cargo.lock, build and dev dependencies included, since
# `cargo build --locked` and `cargo test --locked` need them all), and builds the workspace with
# that toolchain when rustup already has it. It never downloads a toolchain.
#
# Our own code's use of newer standard-library items is checked elsewhere: clippy's
# `incompatible_msrv` lint reads the same rust-version in the lint step of .ci/run.
#
# Exit status: 0 fine; 1 a dependency needs a newer Rust than we declare (or the build with
# our minimum toolchain failed); 2 usage; 3 cannot read the manifest or the metadata.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/check-msrv.sh [--no-build]

Fails when a package in Cargo.lock declares a rust-version above the one in Cargo.toml.
When rustup has a toolchain of exactly that version installed, also runs
`cargo check --locked --workspace --all-targets` with it (skipped with --no-build).
No toolchain is ever downloaded.
EOF
}

build=1
while [ "$#" -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "check-msrv: unknown option: $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

cd "$(dirname "$0")/.."

# "1.88" -> "1.88.0", so that sort -V compares like with like.
norm() {
  case "$1" in
    *.*.*) printf '%s\n' "$1" ;;
    *.*) printf '%s.0\n' "$1" ;;
    *) printf '%s.0.0\n' "$1" ;;
  esac
}

# true when version $1 > version $2
newer() {
  local a b
  a=$(norm "$1")
  b=$(norm "$2")
  [ "$a" != "$b" ] && [ "$(printf '%s\n%s\n' "$a" "$b" | sort -V | tail -n 1)" = "$a" ]
}

ours=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -n 1)
if [ -z "$ours" ]; then
  echo "check-msrv: Cargo.toml declares no rust-version" >&2
  exit 3
fi

if ! meta=$(cargo metadata --locked --format-version 1 2>/dev/null); then
  echo "check-msrv: cargo metadata --locked failed (is Cargo.lock up to date?)" >&2
  exit 3
fi

# One line per package: "<dep|member> <rust_version or null> <name>[@<version>]". In the
# metadata JSON every package object's "id" comes before its "rust_version"; the "id"s of the
# resolve section have no rust_version after them and are dropped. Path packages are our own
# workspace members (doca-sys): their rust-version must equal ours.
packages=$(printf '%s' "$meta" \
  | grep -o '"id":"[^"]*"\|"rust_version":\("[^"]*"\|null\)' \
  | awk '
      /^"id":/ {
        id = substr($0, 7, length($0) - 7)
        kind = (id ~ /^path[+]/) ? "member" : "dep"
        split(id, halves, "#"); url = halves[1]; pkg = halves[2]
        if (kind == "member" && pkg !~ /@/) { n = split(url, dirs, "/"); pkg = dirs[n] }
        next
      }
      /^"rust_version":/ {
        v = substr($0, 16); gsub(/"/, "", v)
        if (pkg != "") print kind, v, pkg
        pkg = ""
      }')
if [ -z "$packages" ]; then
  echo "check-msrv: found no packages in cargo metadata" >&2
  exit 3
fi

total=0
highest=0
highest_by=""
too_new=()
mismatched=()
while read -r kind version pkg; do
  if [ "$kind" = member ]; then
    [ "$version" = "$ours" ] || mismatched+=("${pkg%@*} declares rust-version $version")
    continue
  fi
  total=$((total + 1))
  [ "$version" = null ] && continue
  if newer "$version" "$highest"; then
    highest=$version
    highest_by=$pkg
  fi
  if newer "$version" "$ours"; then
    too_new+=("$pkg needs Rust $version")
  fi
done <<<"$packages"

echo "check-msrv: rust-version in Cargo.toml: $ours"
echo "check-msrv: highest rust-version declared by the $total locked dependencies: $highest ($highest_by)"

status=0
if [ "${#too_new[@]}" -gt 0 ]; then
  echo "check-msrv: FAIL: these locked packages need a newer Rust than rust-version $ours:" >&2
  printf '  %s\n' "${too_new[@]}" >&2
  echo "check-msrv: raise rust-version in Cargo.toml (and doca-sys/Cargo.toml) to $highest, or lock older versions" >&2
  status=1
fi
if [ "${#mismatched[@]}" -gt 0 ]; then
  echo "check-msrv: FAIL: workspace members must declare the same rust-version as Cargo.toml ($ours):" >&2
  printf '  %s\n' "${mismatched[@]}" >&2
  status=1
fi
if [ "$status" -eq 0 ] && newer "$ours" "$highest"; then
  echo "check-msrv: note: no dependency needs more than $highest; $ours is kept for our own code"
fi

if [ "$build" -eq 1 ] && [ "$status" -eq 0 ]; then
  toolchain=""
  if command -v rustup >/dev/null 2>&1; then
    toolchain=$(rustup toolchain list 2>/dev/null \
      | awk -v a="$ours" -v b="$(norm "$ours")" '$1 ~ ("^(" a "|" b ")-") { print $1; exit }')
  fi
  if [ -n "$toolchain" ]; then
    echo "check-msrv: building with $toolchain"
    if ! CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/msrv" \
      cargo "+$toolchain" check --locked --workspace --all-targets; then
      echo "check-msrv: FAIL: the workspace does not build with Rust $ours" >&2
      status=1
    fi
  else
    echo "check-msrv: Rust $ours is not installed here (this script never downloads a toolchain):" \
      "not built with it (the dependency check above ran; our own code is checked by clippy's" \
      "incompatible_msrv lint in .ci/run's lint step)"
  fi
fi

if [ "$status" -eq 0 ]; then
  echo "check-msrv: ok"
fi
exit "$status"
