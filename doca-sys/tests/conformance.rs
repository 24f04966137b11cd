//! Conformance of our declaration headers (`sim/include`) with the DOCA SDK, checked by
//! the C compiler (`conformance/check.c`): against the real SDK when the crate was built
//! with one, and, everywhere, against a doctored copy of our own headers that proves the
//! check accepts identical declarations and rejects differing ones.

use std::path::{Path, PathBuf};
use std::process::Command;

use rdma_test_support::{skip_or_fail, skip_unless_strict_allows, Allowed};

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn compiler() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

fn have_compiler() -> bool {
    Command::new(compiler())
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Compile check.c with `sdk_dirs` as the SDK's include path; Ok or the compiler's stderr.
fn run_check(sdk_dirs: &[PathBuf]) -> Result<(), String> {
    let m = manifest();
    let mut cmd = Command::new(compiler());
    cmd.args([
        "-fsyntax-only",
        "-std=gnu11",
        "-Wall",
        "-Werror",
        "-DDOCA_ALLOW_EXPERIMENTAL_API",
        "-DDOCA_SYS_CONFORMANCE_CHECK",
    ]);
    for d in sdk_dirs {
        cmd.arg(format!("-I{}", d.display()));
    }
    cmd.arg("-iquote").arg(m.join("sim/include"));
    cmd.arg(m.join("conformance/check.c"));
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", compiler()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn declarations_match_the_real_sdk() {
    if doca_sys::FOUND != "real" {
        // CI has no DOCA SDK; the image build (Dockerfile) runs this test against the real one.
        skip_unless_strict_allows(
            Allowed::DocaSdk,
            &format!(
                "DOCA SDK not installed (doca-sys found={}); the conformance check needs \
                 the SDK's headers (see doca-sys/README.md)",
                doca_sys::FOUND
            ),
        );
        return;
    }
    let dirs: Vec<PathBuf> = doca_sys::SDK_INCLUDE_DIRS
        .split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    if let Err(e) = run_check(&dirs) {
        panic!(
            "our declarations in doca-sys/sim/include differ from DOCA {} in {}:\n{e}",
            doca_sys::DOCA_VERSION.unwrap_or("?"),
            doca_sys::SDK_INCLUDE_DIRS
        );
    }
}

/// A stand-in "SDK": our headers with other include guards and the type bodies always on,
/// so that both copies are seen exactly as with the real SDK. `edit` doctors one file.
fn fake_sdk(tag: &str, edit: Option<(&str, &str, &str)>) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("doca-sys-fake-sdk-{tag}-{}", std::process::id()));
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

fn check_fake(tag: &str, edit: Option<(&str, &str, &str)>) -> Result<(), String> {
    let dir = fake_sdk(tag, edit);
    let r = run_check(std::slice::from_ref(&dir));
    let _ = std::fs::remove_dir_all(Path::new(&dir));
    r
}

#[test]
fn conformance_check_accepts_equal_and_rejects_different_declarations() {
    if !have_compiler() {
        skip_or_fail(&format!(
            "no C compiler ({}) to run the conformance check",
            compiler()
        ));
        return;
    }
    check_fake("same", None).expect("identical declarations must pass");

    // (tag, file, original text, doctored text, what the compiler must name)
    let cases: &[(&str, &str, &str, &str, &str)] = &[
        (
            "proto",
            "doca_rdma.h",
            "doca_rdma_set_gid_index(struct doca_rdma *rdma, uint32_t gid_index)",
            "doca_rdma_set_gid_index(struct doca_rdma *rdma, uint16_t gid_index)",
            "doca_rdma_set_gid_index",
        ),
        (
            "return",
            "doca_pe.h",
            "uint8_t doca_pe_progress(struct doca_pe *pe);",
            "int doca_pe_progress(struct doca_pe *pe);",
            "doca_pe_progress",
        ),
        (
            "missing",
            "doca_pe.h",
            "doca_error_t doca_pe_clear_notification(struct doca_pe *pe, doca_notification_handle_t handle);",
            "",
            "doca_pe_clear_notification",
        ),
        (
            "value",
            "doca_error.h",
            "X(DOCA_ERROR_IO_FAILED, 17)",
            "X(DOCA_ERROR_IO_FAILED, 18)",
            "DOCA_SYS_ERROR_LIST",
        ),
        (
            "enum",
            "doca_ctx.h",
            "\tDOCA_SYS_CTX_STATE_LIST(DOCA_SYS_ENUMERATOR)\n",
            "\tDOCA_CTX_STATE_IDLE = 0, DOCA_CTX_STATE_STARTING = 1,\n\tDOCA_CTX_STATE_RUNNING = 5, DOCA_CTX_STATE_STOPPING = 3,\n",
            "SDK value of DOCA_CTX_STATE_RUNNING differs",
        ),
        (
            "define",
            "doca_dev.h",
            "#define DOCA_DEVINFO_IBDEV_NAME_SIZE 64",
            "#define DOCA_DEVINFO_IBDEV_NAME_SIZE 65",
            "DOCA_DEVINFO_IBDEV_NAME_SIZE",
        ),
        (
            "callback",
            "doca_rdma.h",
            "typedef void (*doca_rdma_task_send_completion_cb_t)(struct doca_rdma_task_send *task,",
            "typedef int (*doca_rdma_task_send_completion_cb_t)(struct doca_rdma_task_send *task,",
            "doca_rdma_task_send_completion_cb_t",
        ),
        (
            "union",
            "doca_types.h",
            "\tuint64_t u64;\n",
            "\tuint32_t u64;\n",
            "doca_data.u64 size",
        ),
    ];
    for (tag, file, from, to, named) in cases {
        match check_fake(tag, Some((file, from, to))) {
            Ok(()) => panic!("{tag}: a differing declaration in {file} was accepted"),
            Err(e) => assert!(
                e.contains(named),
                "{tag}: rejected, but not for `{named}`:\n{e}"
            ),
        }
    }
}
