//! The conformance check's blind spot, closed: C treats an enum parameter as compatible with
//! its underlying integer type, so `conformance/check.c` accepts `enum doca_x` on one side and
//! `uint32_t` on the other. `conformance/check_enums.cc` compiles the same headers as C++,
//! where an enum is a distinct type. Against the real SDK when the crate was built with one;
//! everywhere, against a doctored copy of our own headers that shows both halves.

use std::path::{Path, PathBuf};
use std::process::Command;

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn works(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// The C++ compiler: `$CXX`, else the first of c++, clang++, g++ that runs.
fn cxx() -> Option<String> {
    if let Ok(c) = std::env::var("CXX") {
        return works(&c).then_some(c);
    }
    ["c++", "clang++", "g++"]
        .into_iter()
        .find(|c| works(c))
        .map(str::to_owned)
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

/// Compile `file` (check.c with `cc`, check_enums.cc with `cxx`) against `sdk_dirs`.
fn compile(compiler: &str, std: &str, file: &str, sdk_dirs: &[PathBuf]) -> Result<(), String> {
    let m = manifest();
    let mut cmd = Command::new(compiler);
    cmd.args([
        "-fsyntax-only",
        std,
        "-Wall",
        "-Werror",
        "-DDOCA_ALLOW_EXPERIMENTAL_API",
        "-DDOCA_SYS_CONFORMANCE_CHECK",
    ]);
    for d in sdk_dirs {
        cmd.arg(format!("-I{}", d.display()));
    }
    cmd.arg("-iquote").arg(m.join("sim/include"));
    cmd.arg(m.join("conformance").join(file));
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {compiler}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn enum_parameters_match_the_real_sdk() {
    if doca_sys::FOUND != "real" {
        println!(
            "skipped: DOCA SDK not installed (doca-sys found={})",
            doca_sys::FOUND
        );
        return;
    }
    let Some(cxx) = cxx() else {
        println!("skipped: no C++ compiler for conformance/check_enums.cc");
        return;
    };
    let dirs: Vec<PathBuf> = doca_sys::SDK_INCLUDE_DIRS
        .split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    if let Err(e) = compile(&cxx, "-std=c++17", "check_enums.cc", &dirs) {
        panic!(
            "an enum parameter in doca-sys/sim/include differs from DOCA {} in {}:\n{e}",
            doca_sys::DOCA_VERSION.unwrap_or("?"),
            doca_sys::SDK_INCLUDE_DIRS
        );
    }
}

/// Our headers as a stand-in SDK (other include guards, type bodies on), one file doctored.
fn fake_sdk(tag: &str, edit: Option<(&str, &str, &str)>) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "doca-sys-fake-sdk-enums-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(manifest().join("sim/include")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name == "doca_sim.h" {
            continue;
        }
        let mut text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("DOCA_SYS_DECL_", "FAKE_SDK_GUARD_")
            .replace("DOCA_SYS_CONFORMANCE_CHECK", "FAKE_SDK_NEVER_DEFINED");
        if let Some((file, from, to)) = edit {
            if file == name {
                assert!(text.contains(from), "{file} has no `{from}`");
                text = text.replace(from, to);
            }
        }
        std::fs::write(dir.join(&name), text).unwrap();
    }
    dir
}

#[test]
fn the_cxx_half_rejects_an_enum_parameter_that_c_accepts() {
    let Some(cxx) = cxx() else {
        println!("skipped: no C++ compiler for conformance/check_enums.cc");
        return;
    };
    if !works(&cc()) {
        println!("skipped: no C compiler ({})", cc());
        return;
    }
    let same = fake_sdk("same", None);
    let r = compile(
        &cxx,
        "-std=c++17",
        "check_enums.cc",
        std::slice::from_ref(&same),
    );
    let _ = std::fs::remove_dir_all(Path::new(&same));
    r.expect("identical declarations must pass the C++ half");

    // The SDK takes a plain integer where we declare the enum.
    let doctored = fake_sdk(
        "int",
        Some((
            "doca_rdma.h",
            "enum doca_rdma_transport_type transport_type",
            "uint32_t transport_type",
        )),
    );
    let c = compile(
        &cc(),
        "-std=gnu11",
        "check.c",
        std::slice::from_ref(&doctored),
    );
    let cpp = compile(
        &cxx,
        "-std=c++17",
        "check_enums.cc",
        std::slice::from_ref(&doctored),
    );
    let _ = std::fs::remove_dir_all(Path::new(&doctored));
    assert!(
        c.is_ok(),
        "C accepts enum vs integer (the blind spot this test documents): {c:?}"
    );
    let err = cpp.expect_err("the C++ half must reject enum vs integer");
    assert!(err.contains("doca_rdma_set_transport_type"), "{err}");
}
