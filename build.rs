//! Records build facts that `--version` and `doctor` report: the transports compiled in and
//! the DOCA version found (the DOCA transport arrives with its own issue).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let mut transports = Vec::new();
    if std::env::var_os("CARGO_FEATURE_VERBS").is_some() {
        transports.push("verbs");
    }
    transports.push("tcp");
    println!(
        "cargo:rustc-env=RDMA_CONTAINER_TRANSPORTS={}",
        transports.join(",")
    );
    println!("cargo:rustc-env=RDMA_CONTAINER_DOCA_VERSION=none");
}
