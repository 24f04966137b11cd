//! Records build facts that `--version` and `doctor` report: the transports compiled in and
//! the DOCA version found (none yet: the DOCA and verbs transports arrive with their own issues).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-env=RDMA_CONTAINER_TRANSPORTS=tcp");
    println!("cargo:rustc-env=RDMA_CONTAINER_DOCA_VERSION=none");
}
