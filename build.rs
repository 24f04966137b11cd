//! Records build facts that `--version` and `doctor` report: the transports compiled in and
//! the DOCA version found. The doca transport is compiled only when doca-sys found DOCA (the real
//! SDK or its simulator): doca-sys says so through its `links = "doca"` metadata.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(doca_transport)");
    let found = std::env::var("DEP_DOCA_FOUND").unwrap_or_else(|_| "none".to_owned());
    let mut transports = Vec::new();
    if found != "none" {
        println!("cargo:rustc-cfg=doca_transport");
        transports.push("doca");
    }
    if std::env::var_os("CARGO_FEATURE_VERBS").is_some() {
        transports.push("verbs");
    }
    transports.push("tcp");
    println!(
        "cargo:rustc-env=RDMA_CONTAINER_TRANSPORTS={}",
        transports.join(",")
    );
    let doca = match (found.as_str(), std::env::var("DEP_DOCA_VERSION")) {
        ("none", _) => "none (transport compiled out)".to_owned(),
        (kind, Ok(v)) => format!("{v} ({kind})"),
        (kind, Err(_)) => format!("unknown version ({kind})"),
    };
    println!("cargo:rustc-env=RDMA_CONTAINER_DOCA_VERSION={doca}");
}
