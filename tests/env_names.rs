//! Every `RDMA_CONTAINER_*` environment variable that a manifest, the image, a script or the
//! documentation sets is one the binary reads (issue 32): a renamed variable would otherwise
//! turn, say, `RDMA_CONTAINER_REQUIRE_RDMA=true` in a pod into a silent TCP fallback.
//!
//! What the binary reads: the `[env: NAME=]` of every command's `--help` (clap's own list of
//! the variables behind its flags) and the names the source reads directly.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::{run, SHORT};

/// `RDMA_CONTAINER_*` names in `text`.
fn names_in(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("RDMA_CONTAINER_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..end].trim_end_matches('_');
        // "RDMA_CONTAINER_BENCH_*" names a family, not a variable.
        let family = tail[end..].starts_with('*');
        if name.len() > "RDMA_CONTAINER_".len() && !family {
            found.insert(name.to_owned());
        }
        rest = &tail[end..];
    }
    found
}

/// The files under `dir` (recursively) whose name passes `keep`.
fn files(dir: &Path, keep: &dyn Fn(&Path) -> bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, keep, out);
        } else if keep(&p) {
            out.push(p);
        }
    }
}

/// The variables the binary reads: its commands' `--help` and the source's literals.
fn names_the_binary_reads() -> BTreeSet<String> {
    let mut known = BTreeSet::new();
    for args in [
        &["--help"][..],
        &["bench", "--help"],
        &["doctor", "--help"],
        &["demo", "--help"],
    ] {
        let (code, out, err) = run(args, SHORT);
        assert_eq!(code, 0, "rdma-container {args:?}: {err}");
        let listed: BTreeSet<String> = out
            .split("[env: ")
            .skip(1)
            .filter_map(|s| s.split('=').next())
            .flat_map(names_in)
            .collect();
        assert!(
            !listed.is_empty(),
            "rdma-container {args:?} lists no [env: ...]"
        );
        known.extend(listed);
    }
    let mut sources = Vec::new();
    files(
        &common::repo().join("src"),
        &|p| p.extension().is_some_and(|e| e == "rs"),
        &mut sources,
    );
    for f in sources {
        let text = std::fs::read_to_string(&f).expect("source");
        for line in text.lines() {
            // Only names the code reads (env::var, clap's env = "..."), not prose.
            if line.contains("env::var") || line.contains("env = \"") || line.contains("ENV") {
                known.extend(names_in(line));
            }
        }
    }
    known
}

/// The variables the image's entrypoint and the scripts read themselves (`$NAME`, `${NAME`).
fn names_the_scripts_read() -> BTreeSet<String> {
    let mut known = BTreeSet::new();
    let mut scripts = vec![common::repo().join("docker/entrypoint.sh")];
    files(
        &common::repo().join("scripts"),
        &|p| p.extension().is_some_and(|e| e == "sh") && !p.ends_with("mutants.sh"),
        &mut scripts,
    );
    for f in scripts {
        let text = std::fs::read_to_string(&f).expect("script");
        for piece in text.split('$').skip(1) {
            let piece = piece.trim_start_matches('{');
            if piece.starts_with("RDMA_CONTAINER_") {
                let end = piece
                    .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                    .unwrap_or(piece.len());
                known.insert(piece[..end].to_owned());
            }
        }
    }
    known
}

#[test]
fn every_variable_the_manifests_image_and_docs_set_is_one_the_binary_reads() {
    let mut known = names_the_binary_reads();
    known.extend(names_the_scripts_read());
    let repo = common::repo();
    let mut set_by = Vec::new();
    for dir in ["deploy", "docker", "docs", "python", "scripts"] {
        files(
            &repo.join(dir),
            &|p| {
                p.extension().is_some_and(|e| {
                    ["yaml", "yml", "md", "sh", "py", "toml", "json", "env"]
                        .contains(&e.to_str().unwrap_or(""))
                })
            },
            &mut set_by,
        );
    }
    set_by.extend([repo.join("Dockerfile"), repo.join("README.md")]);
    let mut unknown = Vec::new();
    let mut seen = 0;
    for f in &set_by {
        // Its list of planted bugs names a renamed variable on purpose.
        if f.ends_with("scripts/mutants.sh") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for name in names_in(&text) {
            // Test builds' hooks (--features test-hooks) are not in a release's --help.
            if name.starts_with("RDMA_CONTAINER_TEST_") {
                continue;
            }
            seen += 1;
            if !known.contains(&name) {
                unknown.push(format!(
                    "{name} in {}",
                    f.strip_prefix(&repo).unwrap_or(f).display()
                ));
            }
        }
    }
    assert!(
        seen > 20,
        "only {seen} variable uses found: the scan is broken"
    );
    assert!(
        unknown.is_empty(),
        "variables the binary does not read (renamed or misspelt?):\n{}\nknown: {known:?}",
        unknown.join("\n")
    );
}

#[test]
fn the_kubernetes_manifests_set_variables_the_binary_reads() {
    let known = names_the_binary_reads();
    let mut manifests = Vec::new();
    files(
        &common::repo().join("deploy/kubernetes"),
        &|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"),
        &mut manifests,
    );
    let mut names = BTreeSet::new();
    for m in &manifests {
        names.extend(names_in(&std::fs::read_to_string(m).expect("manifest")));
    }
    assert!(
        names.contains("RDMA_CONTAINER_REQUIRE_RDMA"),
        "the manifests pin RDMA with RDMA_CONTAINER_REQUIRE_RDMA: {names:?}"
    );
    let unknown: Vec<&String> = names.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "the manifests set {unknown:?}, which the binary does not read"
    );
}
