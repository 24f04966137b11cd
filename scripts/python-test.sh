#!/usr/bin/env bash
# Tests the Python module from a fresh virtual environment, installed the way the README says
# (`pip install ./python`): the python crate's fmt and clippy, mypy on the stubs, the drop-in
# and the examples, mypy.stubtest of the stubs against the built module, a local wheel (which
# must not carry libibverbs), the pytest suite over tcp, and the session tests again over the
# DOCA simulator (the module rebuilt with the doca-sim feature).
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: scripts/python-test.sh [--no-doca-sim] [--keep-venv]

  --no-doca-sim  skip the second build (feature doca-sim) and its session tests
  --keep-venv    reuse the virtual environment of an earlier run (default: a fresh one)

Env:  PYTHON            interpreter to make the venv with (default: python3; needs >= 3.11)
      PYTHON_TEST_DIR   where the venv and wheels go (default: target/python-test)

Exits non-zero when any step fails (pytest collecting no tests counts as a failure).
EOF
}

doca_sim=1
keep_venv=0
for arg in "$@"; do
	case "$arg" in
	--help | -h) usage; exit 0 ;;
	--no-doca-sim) doca_sim=0 ;;
	--keep-venv) keep_venv=1 ;;
	*) echo "python-test: unknown argument $arg" >&2; usage >&2; exit 2 ;;
	esac
done

cd "$(dirname "$0")/.."
repo=$(pwd)
dir=${PYTHON_TEST_DIR:-$repo/target/python-test}
venv=$dir/venv
python=${PYTHON:-python3}

# Each step says when it started (seconds into the script), so CI's log shows where the time goes.
step() { printf '\n--- python-test: %s (at %ss)\n' "$*" "$SECONDS"; }

"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
	echo "python-test: $python is older than 3.11 (the module's abi3 floor: the buffer protocol)" >&2
	exit 1
}

step "rust: fmt and clippy of the python crate"
cargo fmt --manifest-path python/Cargo.toml --check
PYO3_PYTHON=$(command -v "$python") cargo clippy --manifest-path python/Cargo.toml --locked --all-targets -- -D warnings

step "a fresh virtual environment in $venv"
if [ "$keep_venv" = 0 ]; then
	rm -rf "$venv"
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
py=$venv/bin/python
"$py" -m pip install --quiet --upgrade pip
"$py" -m pip install --quiet pytest numpy mypy

step "pip install ./python (the README's install line)"
"$py" -m pip install --quiet ./python
"$py" -c 'import rdma_container, rdma; print("rdma_container", rdma_container.__version__, rdma_container.compiled_in_transports())'

step "mypy: the stubs, the rdma drop-in, the examples; stubtest against the built module"
"$py" -m mypy python/rdma_container/__init__.pyi python/rdma_container/aio.py python/rdma python/examples
(cd "$dir" && "$py" -m mypy.stubtest rdma_container --allowlist "$repo/python/tests/stubtest-allowlist.txt")

step "a local wheel (abi3), without libibverbs"
rm -rf "$dir/wheels"
"$py" -m pip wheel --quiet --no-deps --wheel-dir "$dir/wheels" ./python
wheel=$(ls "$dir"/wheels/rdma_container-*.whl)
echo "built $wheel"
"$py" - "$wheel" <<'EOF'
import subprocess, sys, tempfile, zipfile
wheel = sys.argv[1]
assert "abi3" in wheel, f"not an abi3 wheel: {wheel}"
names = zipfile.ZipFile(wheel).namelist()
for needed in ("rdma_container/__init__.py", "rdma_container/__init__.pyi", "rdma_container/aio.py", "rdma_container/py.typed", "rdma/__init__.py"):
    assert needed in names, f"{needed} missing from the wheel"
natives = [n for n in names if n.startswith("rdma_container/_native") and n.endswith(".so")]
assert len(natives) == 1, names
bundled = [n for n in names if "ibverbs" in n or "libmlx" in n or "librdmacm" in n]
assert not bundled, f"rdma-core bundled: {bundled}"
with tempfile.TemporaryDirectory() as tmp:
    so = zipfile.ZipFile(wheel).extract(natives[0], tmp)
    dynamic = subprocess.run(["readelf", "-d", so], capture_output=True, text=True, check=True).stdout
needed_libs = [l for l in dynamic.splitlines() if "NEEDED" in l]
assert not any("ibverbs" in l or "mlx5" in l for l in needed_libs), needed_libs
print("wheel ok:", len(names), "files;", "; ".join(l.split()[-1] for l in needed_libs))
EOF

step "pytest (tcp)"
set +e
# pytest's own entry point: `python -m pytest` would put the working directory on sys.path,
# and python/rdma_container (the sources, without the compiled module) would shadow the install.
"$venv/bin/pytest" -q python/tests
status=$?
set -e
if [ "$status" -ne 0 ]; then
	echo "python-test: pytest failed (exit $status; 5 means no tests ran)" >&2
	exit 1
fi

if [ "$doca_sim" = 1 ]; then
	step "the module again with --features doca-sim; session tests over the DOCA simulator"
	MATURIN_PEP517_ARGS="--features doca-sim" "$py" -m pip install --quiet --force-reinstall --no-deps ./python
	"$py" -c 'import rdma_container as rc; t = rc.compiled_in_transports(); assert "doca" in t, t; print(t)'
	set +e
	DOCA_SIM_START=async RDMA_TEST_TRANSPORT=doca "$venv/bin/pytest" -q python/tests/test_session.py python/tests/test_interrupt.py python/tests/test_aio.py
	status=$?
	set -e
	# Leave the default build installed: the wheel built above (the same sources and features,
	# without building them a fourth time).
	"$py" -m pip install --quiet --force-reinstall --no-deps "$wheel"
	if [ "$status" -ne 0 ]; then
		echo "python-test: pytest over the DOCA simulator failed (exit $status)" >&2
		exit 1
	fi
fi

step "all python checks passed"
