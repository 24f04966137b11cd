# rdma-container images, two flavours from this one Dockerfile (docs/containers.md).
#
# 1. DOCA (the default, the last stage): NVIDIA's DOCA images, the binary built with the doca
#    transport required. x86_64 host (ConnectX or the host side of a BlueField):
#      docker build -t rdma-container:0.1.0 .
#    BlueField Arm cores (aarch64), with buildx (QEMU) on an x86_64 machine or natively on the DPU:
#      docker buildx build --platform linux/arm64 --build-arg DOCA_VARIANT= -t rdma-container:0.1.0-dpu .
#      docker build --build-arg DOCA_VARIANT= -t rdma-container:0.1.0-dpu .      # on the DPU itself
# 2. roce (any RoCE NIC or soft-RoCE, no DOCA): rdma-core from the distribution and the binary
#    without the doca transport, on a Debian or Ubuntu base chosen with ROCE_BASE_IMAGE:
#      docker build --target roce -t rdma-container:0.1.0-roce .
#    The binary is built in a stage FROM the Rust image (RUST_IMAGE), or taken ready-made from
#    the build context (ROCE_BINARY=context: dist/rdma-container), which is how CI builds it
#    with no registry at all (scripts/container-test.sh):
#      cargo build --release --locked && mkdir -p dist \
#        && strip --strip-debug -o dist/rdma-container target/release/rdma-container
#      docker build --target roce --build-arg ROCE_BINARY=context -t rdma-container:0.1.0-roce .
#
# DOCA build stage: the DOCA devel image (headers, pkg-config files, libraries), a pinned Rust
# toolchain, `cargo build --release --locked --features require-doca` (the build fails instead
# of falling back to a binary without DOCA), and doca-sys's conformance tests against the
# image's real headers. DOCA runtime stage: the matching DOCA runtime image plus the binary and
# the entrypoint, nothing else. Downloads happen only while building (apt, rustup, crates);
# nothing in either runtime image downloads anything.
#
# Both flavours: the same entrypoint (docker/entrypoint.sh), STOPSIGNAL and ENTRYPOINT, and no
# CMD: `docker run IMAGE` with no arguments runs `rdma-container doctor` (the entrypoint's
# default, which needs no address), or the session that RDMA_CONTAINER_SERVER/_CLIENT describe
# (a pod configured by variables, deploy/kubernetes); `docker run IMAGE --server IP:PORT` etc.
# pass their arguments to the binary. (ENTRYPOINT clears a CMD inherited from the base image.)
# Image tags follow the program's version, Cargo.toml's `version` (0.1.0): VERSION, VERSION-dpu,
# VERSION-roce (tests/packaging_static.rs checks every tag the docs and manifests name).

# DOCA release of both images.
ARG DOCA_VERSION=3.1.0
# Tag suffix: "-host" for the x86_64 host images, empty for the BlueField (aarch64) images.
ARG DOCA_VARIANT=-host
# Runtime flavour: full-rt (default) has every DOCA user-space runtime library, libdoca_rdma
# included; base-rt may lack it, and then the ldd check in the runtime stage fails the build.
ARG DOCA_RUNTIME_FLAVOR=full-rt
ARG DOCA_IMAGE=nvcr.io/nvidia/doca/doca
# Full tags, for releases whose tags follow another pattern (3.2+: 3.2.0-devel-ubuntu24.04-host).
ARG DOCA_DEVEL_TAG=${DOCA_VERSION}-devel${DOCA_VARIANT}
ARG DOCA_RUNTIME_TAG=${DOCA_VERSION}-${DOCA_RUNTIME_FLAVOR}${DOCA_VARIANT}
# The Rust toolchain, pinned (at least Cargo.toml's rust-version): rustup installs it in the
# DOCA build stage; the roce flavour's build stage starts from the matching Rust image.
ARG RUST_VERSION=1.95.0
ARG RUST_IMAGE=docker.io/library/rust:${RUST_VERSION}-slim-bookworm
# roce flavour: the base of the image (any Debian or Ubuntu release with rdma-core packages)
# and where the binary comes from: "build" (a stage FROM RUST_IMAGE) or "context"
# (dist/rdma-container in the build context, built beforehand with cargo).
ARG ROCE_BASE_IMAGE=docker.io/library/debian:bookworm-slim
ARG ROCE_BINARY=build

# ---------------------------------------------------------------------------------------------
# roce flavour (docker build --target roce)
# ---------------------------------------------------------------------------------------------
FROM ${RUST_IMAGE} AS roce-binary-build
WORKDIR /src
COPY . .
# The default features: verbs (rdma-core loaded at run time) and tcp; no DOCA.
RUN cargo build --release --locked \
 && strip --strip-debug -o /rdma-container target/release/rdma-container

FROM scratch AS roce-binary-context
COPY dist/rdma-container /rdma-container

# The binary chosen by ROCE_BINARY (only the stage named here is built). It names a stage of
# this file, not an image, so there is no tag to pin.
# hadolint ignore=DL3006
FROM roce-binary-${ROCE_BINARY} AS roce-binary

FROM ${ROCE_BASE_IMAGE} AS roce
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# rdma-core from the distribution: libibverbs and librdmacm (the verbs transport loads both with
# dlopen) and the providers (mlx5 for ConnectX/BlueField, rxe for soft-RoCE, ...). Versions
# are the base release's (pinning them would break the build on every point release).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends libibverbs1 librdmacm1 ibverbs-providers \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*
COPY --from=roce-binary /rdma-container /usr/local/bin/rdma-container
COPY docker/entrypoint.sh /usr/local/bin/rdma-container-entrypoint.sh
# The same checks as the DOCA runtime stage, minus DOCA: every linked library resolves, the
# dlopen'd rdma-core libraries are in the loader cache, the mlx5 and rxe providers are there,
# and the binary is the one without DOCA. (pipefail is on: no `grep -q` that could close a
# pipe early, and no pipeline whose first command may fail on a missing directory.)
RUN if ldd /usr/local/bin/rdma-container | grep 'not found'; then \
        echo "the base image lacks the libraries above" >&2; exit 1; \
    fi \
 && for lib in libibverbs.so.1 librdmacm.so.1; do \
        if ! ldconfig -p | grep -F "$lib" >/dev/null; then echo "the image lacks $lib (rdma-core)" >&2; exit 1; fi; \
    done \
 && for provider in mlx5 rxe; do \
        found=$(find /usr/lib* -name "lib${provider}-rdmav*.so" 2>/dev/null || true); \
        if [ -z "$found" ]; then \
            echo "the image has no libibverbs $provider provider (ibverbs-providers)" >&2; exit 1; \
        fi; \
    done \
 && /usr/local/bin/rdma-container --version | tee /tmp/version \
 && grep -q '^transports:.*verbs' /tmp/version \
 && grep -q '^DOCA: none' /tmp/version \
 && rm /tmp/version
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/rdma-container-entrypoint.sh"]

# ---------------------------------------------------------------------------------------------
# DOCA flavour (the default)
# ---------------------------------------------------------------------------------------------

FROM ${DOCA_IMAGE}:${DOCA_DEVEL_TAG} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# The Rust toolchain (pinned above).
ARG RUST_VERSION
ENV DEBIAN_FRONTEND=noninteractive \
    RUSTUP_HOME=/usr/local/rustup \
    CARGO_HOME=/usr/local/cargo \
    PATH=/usr/local/cargo/bin:$PATH

# curl/ca-certificates for rustup; clang/libclang for bindgen (doca-sys over the real DOCA
# headers; the verbs transport needs neither: verbs-sys is our own declarations, libibverbs is
# loaded at run time); pkg-config to find DOCA; the rdma-core headers that DOCA's headers
# include (from the DOCA apt repository the image is preconfigured with). Not pinned: the
# versions that match the image come from its own repository, and pins would break with each
# DOCA release.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        ca-certificates curl build-essential pkg-config clang libclang-dev \
        libibverbs-dev librdmacm-dev \
 && rm -rf /var/lib/apt/lists/*

RUN curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs \
      | sh -s -- -y --no-modify-path --profile minimal --default-toolchain "${RUST_VERSION}" \
 && rustc --version && cargo --version

# DOCA's .pc files are outside pkg-config's default path: both layouts seen in DOCA releases,
# for both architectures (missing directories are ignored).
ENV PKG_CONFIG_PATH=/opt/mellanox/doca/lib/x86_64-linux-gnu/pkgconfig:/opt/mellanox/doca/lib/aarch64-linux-gnu/pkgconfig:/opt/mellanox/doca/infrastructure/lib/pkgconfig
RUN pkg-config --modversion doca-common doca-rdma \
 || echo "pkg-config does not list doca-common/doca-rdma here: doca-sys's build script probes further"

WORKDIR /src
COPY . .
RUN cargo fetch --locked
# The conformance check: doca-sys's tests against the image's real DOCA headers and libraries.
# Its own step (not joined to the fetch or the build), so that a failing build names which of
# the three failed.
# hadolint ignore=DL3059
RUN cargo test --release --locked --offline -p doca-sys --features require-doca
# The binary must have the doca transport, built against the real SDK (never "none", never the
# test simulator "(sim)"), and say so in --version.
RUN cargo build --release --locked --offline --features require-doca \
 && ./target/release/rdma-container --version | tee /tmp/version \
 && grep -q '^transports:.*doca' /tmp/version \
 && grep -q '^DOCA: ' /tmp/version \
 && ! grep -Eq '^DOCA: (none|.*\(sim\))' /tmp/version \
 && ldd ./target/release/rdma-container

FROM ${DOCA_IMAGE}:${DOCA_RUNTIME_TAG} AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

COPY --from=build /src/target/release/rdma-container /usr/local/bin/rdma-container
COPY docker/entrypoint.sh /usr/local/bin/rdma-container-entrypoint.sh

# Fail the build here, not at `docker run`, if the runtime image lacks a library the binary
# needs (e.g. with DOCA_RUNTIME_FLAVOR=base-rt): those it links (libdoca_rdma, libdoca_common,
# ...: ldd), those the verbs transport loads with dlopen (libibverbs.so.1, librdmacm.so.1,
# libmlx5.so.1: invisible to ldd, so asked of the loader cache), and libibverbs' mlx5 provider.
RUN if ldd /usr/local/bin/rdma-container | grep 'not found'; then \
        echo "the runtime image lacks the libraries above: use DOCA_RUNTIME_FLAVOR=full-rt" >&2; exit 1; \
    fi \
 && for lib in libibverbs.so.1 librdmacm.so.1 libmlx5.so.1; do \
        if ! ldconfig -p | grep -F "$lib" >/dev/null; then \
            echo "the runtime image lacks $lib (rdma-core): use DOCA_RUNTIME_FLAVOR=full-rt" >&2; exit 1; \
        fi; \
    done \
 && found=$(find /usr/lib* /opt/mellanox -name 'libmlx5-rdmav*.so' 2>/dev/null || true) \
 && if [ -z "$found" ]; then \
        echo "the runtime image has no libibverbs mlx5 provider (rdma-core's ibverbs-providers): use DOCA_RUNTIME_FLAVOR=full-rt" >&2; exit 1; \
    fi \
 && echo "mlx5 provider: $found" \
 && /usr/local/bin/rdma-container --version

# The binary ends a session cleanly on SIGTERM (exit 143, "stopped (SIGTERM)"; it installs a
# handler, so it receives the signal as PID 1 too): `docker stop` and the kubelet send it. No
# CMD: without arguments the entrypoint runs `doctor` (above).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/rdma-container-entrypoint.sh"]
