//! Helpers shared by every test of the rdma-container workspace (a dev-dependency only; never
//! published):
//!
//! - [`FakeSysfs`]: a fake `/sys` with `class/infiniband` devices, ports and GID tables, as the
//!   kernel lays them out (mlx5 v1/v2 pairs, VLANs, bonds, unreadable entries, ...);
//!   [`FakeHost`]: a fake container or host (`dev/`, `proc/self/`, `sys/`) for the scripts.
//! - [`Proc`]: a child process with its output captured, bounded waits, killed on drop;
//!   [`run_command`] runs one to the end. The binary under test is not known here (Cargo only
//!   tells integration tests its path): pass `env!("CARGO_BIN_EXE_rdma-container")` in.
//! - [`free_port`] and [`test_ip`]: addresses for the process tests; [`listening_on_free_port`]
//!   starts a server again on another port when its port was taken in between.
//! - [`skip_or_fail`] and [`skip_unless_strict_allows`]: a test that cannot run says so, and
//!   fails instead when `RDMA_TEST_STRICT=1` (CI sets it), so no skip passes silently in CI.
//!
//! - [`wire`]: an independent encoder of the wire protocol, for raw-protocol peers.
//!
//! Every wait here is bounded: a bug makes a test fail with the children's output, never hang.

mod host;
mod net;
mod output;
mod process;
mod skip;
mod sysfs;
pub mod wire;

pub use host::{FakeHost, CAPS_DOCKER_DEFAULT, CAPS_WITH_IPC_LOCK};
pub use net::{free_port, listening_on_free_port, test_ip};
pub use output::{check_counting, lost_after, messages_after};
pub use process::{
    long, on_path, run_command, scaled, scaled_secs, short, target_command, time_scale, Finished,
    Proc, LONG, SHORT,
};
pub use skip::{skip_or_fail, skip_unless_strict_allows, strict, Allowed, STRICT_ENV};
pub use sysfs::{ipv4_gid, FakeSysfs, FE80_A, FE80_B, GID_V1, GID_V2, ZERO_GID};
