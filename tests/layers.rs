//! The library's layers import only downward (docs/design.md, "Layers", issue 34): nothing
//! below the session layer (the session core, the wire encoding, networking, RoCE, the
//! transports, host facts, errors, configuration) names the session drivers, the listener, the
//! public sink and src, doctor or the program. Read from the sources, so a `use` added in the
//! wrong direction fails here before it becomes a circle.

use std::path::{Path, PathBuf};

/// Files and directories under `src/` below the session layer.
const BELOW_THE_SESSION_LAYER: [&str; 14] = [
    "session_core",
    "proto",
    "net",
    "roce",
    "transport",
    "auth.rs",
    "busy_poll.rs",
    "checksum.rs",
    "config.rs",
    "error.rs",
    "error_kind.rs",
    "host.rs",
    "log_text.rs",
    "time.rs",
];

/// Paths a module below the session layer must never name.
const ABOVE: [&str; 9] = [
    "crate::session::",
    "crate::session;",
    "crate::listener",
    "crate::sender",
    "crate::receiver",
    "crate::duplex",
    "crate::doctor",
    "crate::cli",
    "rdma_container::",
];

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .expect("a source directory")
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for entry in entries {
            rust_files(&entry, out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// Every line of `files` (comments left out) that names one of `forbidden`.
fn offending_lines(files: &[PathBuf], forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).expect("a readable source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if let Some(name) = forbidden.iter().find(|f| code.contains(*f)) {
                found.push(format!(
                    "{}:{}: names {name}: {}",
                    file.display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    found
}

#[test]
fn nothing_below_the_session_layer_imports_the_session_the_listener_doctor_or_the_program() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for part in BELOW_THE_SESSION_LAYER {
        let path = src.join(part);
        assert!(
            path.exists(),
            "{} is gone: update this list",
            path.display()
        );
        rust_files(&path, &mut files);
    }
    assert!(files.len() > 40, "only {} files read", files.len());
    let found = offending_lines(&files, &ABOVE);
    assert!(found.is_empty(), "imports upward:\n{}", found.join("\n"));
}

#[test]
fn the_library_never_names_the_program() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.retain(|f| !f.starts_with(src.join("cli")) && f != &src.join("main.rs"));
    let found = offending_lines(&files, &["crate::cli", "mod cli", "anyhow::", "env_logger"]);
    // The one exception: a unit test checks the program's anyhow line (a dev-dependency).
    let found: Vec<_> = found
        .into_iter()
        .filter(|l| !l.contains("src/error.rs") || !l.contains("anyhow::"))
        .collect();
    assert!(
        found.is_empty(),
        "the library names the program:\n{}",
        found.join("\n")
    );
}
