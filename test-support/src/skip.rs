//! Skips that cannot pass silently: a test that cannot run here prints why and passes, unless
//! `RDMA_TEST_STRICT=1` (set by `.ci/run`) says every test must really run; then it fails.
//!
//! Which to use:
//! - something CI provides (root, iproute2, shellcheck, a C compiler, python3 with PyYAML, a
//!   non-loopback address): [`skip_or_fail`];
//! - something CI can never provide and the test is only worth running where it is:
//!   `#[ignore = "needs X, which CI does not have: cargo test --test T -- --ignored"]`, and
//!   [`skip_or_fail`] inside for when it is run with `--ignored` without X;
//! - a test that must keep running by default where X exists (the DOCA SDK conformance check,
//!   which the image build runs) or that belongs to another CI pass: [`skip_unless_strict_allows`]
//!   with one of the [`Allowed`] reasons.

use std::fmt;

/// The environment variable that turns skips into failures (`1`; unset, empty or `0` is off).
pub const STRICT_ENV: &str = "RDMA_TEST_STRICT";

/// Whether `RDMA_TEST_STRICT` asks that no test be skipped.
pub fn strict() -> bool {
    std::env::var(STRICT_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A test that cannot run (a tool, privilege or host feature is missing): prints
/// `skipped: <reason>` and returns, so the caller returns and the test passes; under
/// `RDMA_TEST_STRICT=1` panics with `required test could not run: <reason>` instead.
///
/// ```
/// # fn on_path(_: &str) -> Option<std::path::PathBuf> { None }
/// # std::env::remove_var("RDMA_TEST_STRICT");
/// let Some(shellcheck) = on_path("shellcheck") else {
///     rdma_test_support::skip_or_fail("shellcheck is not installed (apt-get install shellcheck)");
///     return;
/// };
/// # let _ = shellcheck;
/// ```
#[track_caller]
pub fn skip_or_fail(reason: &str) {
    if strict() {
        panic!("required test could not run: {reason} ({STRICT_ENV}=1)");
    }
    eprintln!("skipped: {reason}");
}

/// Why a test may be skipped even under `RDMA_TEST_STRICT=1`: the closed list of things CI
/// can never provide, or of runs the test does not belong to. Anything else uses
/// [`skip_or_fail`]. Add a variant only with the reason CI cannot run it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowed {
    /// A real NVIDIA DOCA SDK (headers and libraries under /opt/mellanox/doca). CI has none
    /// (it tests against the DOCA simulator); the container image build (`Dockerfile`, on
    /// NVIDIA's DOCA devel image) runs these tests against the real SDK by default, which is
    /// why they are not `#[ignore]`d.
    DocaSdk,
    /// An RDMA NIC (`RDMA_TEST_ADDR` naming its address). CI has no RDMA hardware; the verbs
    /// transport over soft-RoCE is covered by `scripts/softroce-vm.sh` in CI instead.
    RdmaHardware,
    /// The test is about one transport and this run selects another (`RDMA_TEST_TRANSPORT`):
    /// CI runs the suite once per transport, and the test runs in the pass it is about.
    OtherTransport,
}

impl Allowed {
    /// The short tag printed with the skip.
    pub fn tag(self) -> &'static str {
        match self {
            Allowed::DocaSdk => "doca-sdk",
            Allowed::RdmaHardware => "rdma-hardware",
            Allowed::OtherTransport => "other-transport",
        }
    }
}

impl fmt::Display for Allowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.tag())
    }
}

/// A skip that stays a skip under `RDMA_TEST_STRICT=1`, for the [`Allowed`] reasons only:
/// prints `skipped: <reason>` (plus `(allowed under RDMA_TEST_STRICT: <tag>)` when strict)
/// and returns; the caller returns and the test passes.
pub fn skip_unless_strict_allows(allowed: Allowed, reason: &str) {
    if strict() {
        eprintln!("skipped: {reason} (allowed under {STRICT_ENV}: {allowed})");
    } else {
        eprintln!("skipped: {reason}");
    }
}
