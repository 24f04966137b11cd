//! Build script of `doca-sys`.
//!
//! Decides where the DOCA API comes from, generates the bindings and tells dependents
//! (through the `links = "doca"` metadata) what it found:
//!
//! * **sim** (feature `sim` or `DOCA_SYS_SIM=1`): bindings from our declaration headers in
//!   `sim/include`, and the simulator in `sim/src` compiled and linked statically.
//! * **real**: the SDK found by pkg-config (`doca-common` + `doca-rdma`, then the umbrella
//!   `doca`), with the standard pkgconfig directories under `$DOCA_ROOT` and
//!   `/opt/mellanox/doca` added, or else by its include/lib directories. DOCA older than 2.9
//!   is refused.
//! * **none**: no bindings, a warning, and (feature `require-doca`) a build error.
//!
//! Metadata for dependents: `DEP_DOCA_FOUND` (`real`, `sim` or `none`), `DEP_DOCA_VERSION`,
//! `DEP_DOCA_INCLUDE`, and `DEP_DOCA_RPATH` (the SDK's library directory, which a binary's
//! own build script should turn into `-Wl,-rpath`: link arguments do not propagate).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

/// Oldest DOCA release whose API matches our declarations (connection objects, sync start).
const MIN_VERSION: (u32, u32) = (2, 9);

/// What the simulator claims to be.
const SIM_VERSION: &str = "3.1.0-sim";

/// What to install when DOCA is required but missing.
const INSTALL_HINT: &str =
    "install the DOCA SDK development packages (doca-sdk-common and doca-sdk-rdma, \
from NVIDIA's DOCA apt repository; they install /opt/mellanox/doca) or build inside the \
nvcr.io/nvidia/doca/doca:3.1.0-devel image (3.1.0-devel-host on x86_64); set DOCA_ROOT if \
the SDK lives elsewhere. For tests without the SDK use the simulator: DOCA_SYS_SIM=1 or \
--features doca-sys/sim";

/// Types bindgen must emit even when no allowlisted function mentions them.
const TYPES: &[&str] = &[
    "doca_error",
    "doca_error_t",
    "doca_data",
    "doca_access_flag",
    "doca_ctx_states",
    "doca_pe_event_mode",
    "doca_mtu_size",
    "doca_rdma_transport_type",
    "doca_notification_handle_t",
    "doca_event_handle_t",
    "doca_ctx_state_changed_callback_t",
    "doca_rdma_task_send_completion_cb_t",
    "doca_rdma_task_receive_completion_cb_t",
];

/// Constants we bind.
const VARS: &[&str] = &[
    "DOCA_DEVINFO_IPV4_ADDR_SIZE",
    "DOCA_DEVINFO_IFACE_NAME_SIZE",
    "DOCA_DEVINFO_IBDEV_NAME_SIZE",
    "DOCA_GID_BYTE_LENGTH",
];

/// A real SDK found on this machine.
struct Sdk {
    include_dirs: Vec<PathBuf>,
    lib_dirs: Vec<PathBuf>,
    libs: Vec<String>,
    version: String,
    how: String,
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    for path in [
        "build.rs",
        "wrapper.h",
        "subset.inc",
        "sim/include",
        "sim/src",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
    for var in [
        "DOCA_SYS_SIM",
        "DOCA_ROOT",
        "PKG_CONFIG_PATH",
        "PKG_CONFIG_SYSROOT_DIR",
        "LIBCLANG_PATH",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    for cfg in ["doca_sys_bindings", "doca_sys_sim", "doca_sys_real"] {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
    }

    let functions = read_subset(&manifest.join("subset.inc"));
    let sim_wanted = env::var_os("CARGO_FEATURE_SIM").is_some()
        || env::var("DOCA_SYS_SIM")
            .map(|v| matches!(v.trim(), "1" | "true" | "yes" | "on"))
            .unwrap_or(false);

    if sim_wanted {
        build_sim(&manifest, &functions);
        return;
    }
    match probe_real() {
        Ok(sdk) => build_real(&manifest, &functions, sdk),
        Err(reason) => build_none(&reason),
    }
}

/// Names listed as `DOCA_SYS_FN(name)` in subset.inc.
fn read_subset(path: &Path) -> Vec<String> {
    let text =
        fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("DOCA_SYS_FN(")?;
            let name = rest.strip_suffix(')')?;
            Some(name.to_string())
        })
        .collect()
}

fn out_dir() -> PathBuf {
    PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"))
}

fn emit_found(found: &str, version: Option<&str>) {
    println!("cargo:found={found}");
    println!("cargo:rustc-env=DOCA_SYS_FOUND={found}");
    if let Some(v) = version {
        println!("cargo:version={v}");
        println!("cargo:rustc-env=DOCA_SYS_VERSION={v}");
    }
}

// ------------------------------------------------------------------------------ none

fn build_none(reason: &str) {
    if env::var_os("CARGO_FEATURE_REQUIRE_DOCA").is_some() {
        panic!(
            "doca-sys: feature `require-doca` is on but no DOCA SDK was found ({reason}).\n\
             To fix: {INSTALL_HINT}."
        );
    }
    println!(
        "cargo:warning=doca-sys: DOCA SDK not found ({reason}); building without DOCA bindings \
         (the DOCA transport is compiled out). To build against DOCA: {INSTALL_HINT}."
    );
    emit_found("none", None);
    println!("cargo:rustc-env=DOCA_SYS_INCLUDE_DIRS=");
}

// ------------------------------------------------------------------------------ sim

fn build_sim(manifest: &Path, functions: &[String]) {
    let include = manifest.join("sim/include");
    let mut sources: Vec<PathBuf> = fs::read_dir(manifest.join("sim/src"))
        .expect("read sim/src")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    sources.sort();
    cc::Build::new()
        .files(&sources)
        .include(&include)
        .flag_if_supported("-std=gnu11")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("doca_sim");
    println!("cargo:rustc-link-lib=pthread");

    generate_bindings(std::slice::from_ref(&include), functions);
    write_function_table(functions);
    println!("cargo:rustc-cfg=doca_sys_bindings");
    println!("cargo:rustc-cfg=doca_sys_sim");
    emit_found("sim", Some(SIM_VERSION));
    println!("cargo:include={}", include.display());
    println!("cargo:rustc-env=DOCA_SYS_INCLUDE_DIRS=");
}

// ------------------------------------------------------------------------------ real

fn build_real(_manifest: &Path, functions: &[String], sdk: Sdk) {
    generate_bindings(&sdk.include_dirs, functions);
    write_function_table(functions);
    for dir in &sdk.lib_dirs {
        println!("cargo:rustc-link-search=native={}", dir.display());
        // For this crate's own tests; a binary's build script must add its own rpath
        // from DEP_DOCA_RPATH, since link arguments do not reach dependents.
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    }
    for lib in &sdk.libs {
        println!("cargo:rustc-link-lib={lib}");
    }
    println!("cargo:rustc-cfg=doca_sys_bindings");
    println!("cargo:rustc-cfg=doca_sys_real");
    emit_found("real", Some(&sdk.version));
    let includes = join_paths(&sdk.include_dirs);
    println!("cargo:include={includes}");
    println!("cargo:rpath={}", join_paths(&sdk.lib_dirs));
    println!("cargo:rustc-env=DOCA_SYS_INCLUDE_DIRS={includes}");
    println!(
        "cargo:warning=doca-sys: using DOCA {} ({})",
        sdk.version, sdk.how
    );
}

fn join_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

fn target_triple_dir() -> Result<&'static str, String> {
    match env::var("CARGO_CFG_TARGET_ARCH")
        .unwrap_or_default()
        .as_str()
    {
        "x86_64" => Ok("x86_64-linux-gnu"),
        "aarch64" => Ok("aarch64-linux-gnu"),
        other => Err(format!(
            "DOCA ships for x86_64 and aarch64 only, not `{other}`"
        )),
    }
}

/// Find the SDK: pkg-config first (with DOCA's own pkgconfig directories added), then
/// plain include/lib directories (pkg-config refuses DOCA's .pc files when one of their
/// private requirements, e.g. libdpdk, is not installed).
fn probe_real() -> Result<Sdk, String> {
    let triple = target_triple_dir()?;
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Some(root) = env::var_os("DOCA_ROOT").filter(|r| !r.is_empty()) {
        roots.push(PathBuf::from(root));
    }
    roots.push(PathBuf::from("/opt/mellanox/doca"));
    watch_install(&roots);

    let mut pc_dirs: Vec<PathBuf> = Vec::new();
    for root in &roots {
        for sub in [
            format!("lib/{triple}/pkgconfig"),
            "lib/pkgconfig".to_string(),
            "lib64/pkgconfig".to_string(),
            format!("infrastructure/lib/{triple}/pkgconfig"),
            "infrastructure/lib/pkgconfig".to_string(),
        ] {
            let dir = root.join(sub);
            if dir.is_dir() {
                pc_dirs.push(dir);
            }
        }
    }
    if !pc_dirs.is_empty() {
        let mut all = pc_dirs.clone();
        if let Some(existing) = env::var_os("PKG_CONFIG_PATH") {
            all.extend(env::split_paths(&existing));
        }
        let joined = env::join_paths(all).expect("pkgconfig paths");
        env::set_var("PKG_CONFIG_PATH", joined);
    }

    let mut tried: Vec<String> = Vec::new();
    for set in [&["doca-common", "doca-rdma"][..], &["doca"][..]] {
        match probe_pkg_config(set) {
            Ok(sdk) => return check_version(sdk),
            Err(e) => tried.push(e),
        }
    }
    for root in &roots {
        let include = root.join("include");
        if !include.join("doca_rdma.h").is_file() {
            tried.push(format!("no {}", include.join("doca_rdma.h").display()));
            continue;
        }
        let lib = [
            root.join("lib").join(triple),
            root.join("lib"),
            root.join("lib64"),
        ]
        .into_iter()
        .find(|d| d.join("libdoca_rdma.so").exists() && d.join("libdoca_common.so").exists());
        match lib {
            Some(lib) => {
                let version = header_version(std::slice::from_ref(&include)).unwrap_or_default();
                return check_version(Sdk {
                    include_dirs: vec![include],
                    lib_dirs: vec![lib.clone()],
                    libs: vec!["doca_rdma".into(), "doca_common".into()],
                    version,
                    how: format!("headers and libraries under {}", root.display()),
                });
            }
            None => tried.push(format!(
                "headers in {} but no libdoca_rdma.so/libdoca_common.so under {}/lib",
                include.display(),
                root.display()
            )),
        }
    }
    Err(tried.join("; "))
}

/// Re-run this script when an SDK appears, disappears or changes version: watch the
/// nearest existing ancestor of each root, the pkgconfig directories and doca_version.h
/// (cargo would re-run on every build for a path that does not exist).
fn watch_install(roots: &[PathBuf]) {
    for root in roots {
        if let Some(existing) = root.ancestors().find(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", existing.display());
        }
        for sub in ["include/doca_version.h", "lib", "include"] {
            let p = root.join(sub);
            if p.exists() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
        if let Ok(triple) = target_triple_dir() {
            let pc = root.join("lib").join(triple).join("pkgconfig");
            if pc.exists() {
                println!("cargo:rerun-if-changed={}", pc.display());
            }
        }
    }
}

fn probe_pkg_config(names: &[&str]) -> Result<Sdk, String> {
    let mut sdk = Sdk {
        include_dirs: Vec::new(),
        lib_dirs: Vec::new(),
        libs: Vec::new(),
        version: String::new(),
        how: format!("pkg-config {}", names.join(" + ")),
    };
    for name in names {
        let lib = pkg_config::Config::new()
            .cargo_metadata(false)
            .env_metadata(false)
            .probe(name)
            .map_err(|e| format!("pkg-config {name}: {}", summarize(&e.to_string())))?;
        if sdk.version.is_empty() {
            sdk.version = lib.version.clone();
        }
        for d in lib.include_paths {
            if !sdk.include_dirs.contains(&d) {
                sdk.include_dirs.push(d);
            }
        }
        for d in lib.link_paths {
            if !sdk.lib_dirs.contains(&d) {
                sdk.lib_dirs.push(d);
            }
        }
        for l in lib.libs {
            if !sdk.libs.contains(&l) {
                sdk.libs.push(l);
            }
        }
    }
    if let Some(v) = header_version(&sdk.include_dirs) {
        sdk.version = v;
    }
    Ok(sdk)
}

/// The telling line of a pkg-config failure (its message spans many lines).
fn summarize(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines
        .iter()
        .find(|l| {
            l.starts_with("Package ") || l.contains("not found") || l.contains("No such file")
        })
        .or_else(|| lines.first())
        .map(|l| l.to_string())
        .unwrap_or_else(|| "failed".to_string())
}

/// DOCA_VERSION_STRING (3.x) or DOCA_VER_STRING (2.5) from doca_version.h.
fn header_version(include_dirs: &[PathBuf]) -> Option<String> {
    for dir in include_dirs {
        let Ok(text) = fs::read_to_string(dir.join("doca_version.h")) else {
            continue;
        };
        for line in text.lines() {
            let mut words = line.split_whitespace();
            if words.next() != Some("#define") {
                continue;
            }
            if !matches!(
                words.next(),
                Some("DOCA_VERSION_STRING" | "DOCA_VER_STRING")
            ) {
                continue;
            }
            let value: String = words.collect::<Vec<_>>().join(" ");
            return Some(value.trim_matches('"').to_string());
        }
    }
    None
}

/// (major, minor) of "3.1.0105" and the like.
fn parse_version(v: &str) -> Option<(u32, u32)> {
    let mut parts = v.split('.');
    let major = parts.next()?.trim().parse().ok()?;
    let minor = parts.next()?.trim().parse().ok()?;
    Some((major, minor))
}

fn check_version(sdk: Sdk) -> Result<Sdk, String> {
    match parse_version(&sdk.version) {
        Some(v) if v >= MIN_VERSION => Ok(sdk),
        Some(_) => panic!(
            "doca-sys: found DOCA {} ({}), but DOCA {}.{} or newer is required: older releases \
             have a different RDMA API (3-argument doca_rdma_export/connect, asynchronous start, \
             no connection objects). To fix: {INSTALL_HINT}.",
            sdk.version, sdk.how, MIN_VERSION.0, MIN_VERSION.1
        ),
        None => {
            println!(
                "cargo:warning=doca-sys: could not tell the DOCA version of {} (no doca_version.h \
                 version string); assuming it is recent enough",
                sdk.how
            );
            Ok(Sdk {
                version: "unknown".into(),
                ..sdk
            })
        }
    }
}

// ------------------------------------------------------------------------------ bindgen

fn generate_bindings(include_dirs: &[PathBuf], functions: &[String]) {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let mut builder = bindgen::Builder::default()
        .header(manifest.join("wrapper.h").display().to_string())
        .clang_arg("-DDOCA_ALLOW_EXPERIMENTAL_API")
        .rust_target(bindgen::RustTarget::stable(80, 0).expect("rust target 1.80"))
        .formatter(bindgen::Formatter::Rustfmt)
        .layout_tests(true)
        .derive_default(true)
        .derive_eq(true)
        .derive_hash(true)
        .generate_comments(false)
        .default_enum_style(bindgen::EnumVariation::NewType {
            is_bitfield: false,
            is_global: false,
        })
        .newtype_enum("doca_error")
        .newtype_enum("doca_ctx_states")
        .newtype_enum("doca_pe_event_mode")
        .newtype_enum("doca_rdma_transport_type")
        .newtype_enum("doca_mtu_size")
        .bitfield_enum("doca_access_flag")
        // Pulled in by the SDK's doca_rdma.h; never needed by the subset we bind.
        .opaque_type("rdma_cm_id")
        .opaque_type("ibv_.*")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for dir in include_dirs {
        builder = builder.clang_arg(format!("-I{}", dir.display()));
    }
    for f in functions {
        builder = builder.allowlist_function(f);
    }
    for t in TYPES {
        builder = builder.allowlist_type(t);
    }
    for v in VARS {
        builder = builder.allowlist_var(v);
    }
    let bindings = builder.generate().unwrap_or_else(|e| {
        panic!(
            "doca-sys: bindgen failed on the DOCA headers in {}: {e}. bindgen needs libclang \
             (apt-get install libclang-dev, or set LIBCLANG_PATH); the SDK's doca_rdma.h also \
             needs the rdma-core headers (apt-get install librdmacm-dev libibverbs-dev).",
            join_paths(include_dirs)
        )
    });
    bindings
        .write_to_file(out_dir().join("bindings.rs"))
        .expect("write bindings.rs");
}

/// A function naming every bound function, so that linking a test that calls it proves
/// each symbol exists (in the SDK's libraries or in the simulator).
fn write_function_table(functions: &[String]) {
    let mut code = String::from(
        "/// Name and address of every bound DOCA function (linking this proves they all exist).\n\
         pub fn function_addresses() -> ::std::vec::Vec<(&'static str, usize)> {\n    vec![\n",
    );
    for f in functions {
        code.push_str(&format!("        (\"{f}\", {f} as *const () as usize),\n"));
    }
    code.push_str("    ]\n}\n");
    fs::write(out_dir().join("function_table.rs"), code).expect("write function_table.rs");
}
