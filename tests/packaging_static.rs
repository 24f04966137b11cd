//! Static checks of the packaging: the Dockerfile (stages, images, build and runtime steps),
//! .dockerignore, docker/compose.yaml, the container docs, and shellcheck over the scripts and
//! the Dockerfile's RUN lines. The scripts' behaviour is tested in tests/packaging_scripts.rs.

mod common;

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{env_vars, on_path, read, repo, run_command, skip_or_fail, Finished};

/// Bound for one tool run (shellcheck, python3, docker-compose).
const TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `cmd` to the end (at most [`TIMEOUT`]).
fn run(cmd: Command) -> Finished {
    run_command(cmd, TIMEOUT)
}

// ------------------------------------------------------------------------------------------
// The scripts

#[test]
fn scripts_are_executable_with_a_shebang() {
    for script in [
        "docker/entrypoint.sh",
        "scripts/setup-soft-roce.sh",
        "scripts/check-rdma-readiness.sh",
        "scripts/check-minimal-build.sh",
        "scripts/bench-compare.sh",
    ] {
        let meta = fs::metadata(repo().join(script)).unwrap();
        assert!(
            meta.permissions().mode() & 0o111 == 0o111,
            "{script} is not executable (the image runs the entrypoint directly)"
        );
        let text = read(script);
        assert!(text.starts_with("#!"), "{script} has no shebang");
        assert!(
            text.contains("set -eu"),
            "{script} does not stop on errors (set -eu)"
        );
    }
}

#[test]
fn shellcheck_passes_on_every_script() {
    let Some(shellcheck) = on_path("shellcheck") else {
        // CI (CI=true) installs shellcheck in .ci/run, so it must be there.
        assert!(
            std::env::var_os("CI").is_none(),
            "shellcheck is not installed but CI is set: .ci/run should install it"
        );
        skip_or_fail("shellcheck is not installed (apt-get install shellcheck)");
        return;
    };
    let mut cmd = Command::new(shellcheck);
    cmd.arg("--external-sources").current_dir(repo()).args([
        "docker/entrypoint.sh",
        "scripts/setup-soft-roce.sh",
        "scripts/check-rdma-readiness.sh",
        "scripts/check-minimal-build.sh",
        "scripts/bench-compare.sh",
        "scripts/container-test.sh",
        "scripts/build-aarch64.sh",
        "scripts/bluefield-check.sh",
        "scripts/lib/checks.sh",
        "scripts/python-test.sh",
        "scripts/python-bench.sh",
        "scripts/check-k8s-manifests.sh",
    ]);
    let out = run(cmd);
    assert_eq!(out.code, Some(0), "shellcheck:\n{}", out.show());

    // The Dockerfile's RUN lines are /bin/sh scripts too (as hadolint would check them).
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (n, i) in dockerfile()
        .iter()
        .filter(|i| i.keyword == "RUN")
        .enumerate()
    {
        let f = dir.path().join(format!("dockerfile-run-{n}.sh"));
        fs::write(&f, format!("#!/bin/sh\n{}\n", i.args)).unwrap();
        files.push(f);
    }
    assert!(files.len() >= 4, "too few RUN lines found: {}", files.len());
    let mut cmd = Command::new(on_path("shellcheck").unwrap());
    cmd.args(&files);
    let out = run(cmd);
    assert_eq!(
        out.code,
        Some(0),
        "shellcheck of the Dockerfile's RUN lines:\n{}",
        out.show()
    );
}

// ------------------------------------------------------------------------------------------
// Dockerfile, .dockerignore, compose, docs: static checks

/// One Dockerfile instruction: keyword (upper case) and its text with continuations joined.
#[derive(Debug, Clone)]
struct Instr {
    keyword: String,
    args: String,
}

fn dockerfile() -> Vec<Instr> {
    let text = read("Dockerfile");
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if !current.is_empty() && trimmed.starts_with('#') {
            continue; // a comment inside a continued instruction
        }
        if let Some(body) = trimmed.strip_suffix('\\') {
            current.push_str(body);
            current.push(' ');
            continue;
        }
        current.push_str(trimmed);
        let (kw, args) = current
            .split_once(char::is_whitespace)
            .unwrap_or((&current, ""));
        out.push(Instr {
            keyword: kw.to_ascii_uppercase(),
            args: args.trim().to_owned(),
        });
        current.clear();
    }
    assert!(
        current.is_empty(),
        "the Dockerfile ends inside a continued line"
    );
    out
}

/// `${VAR}` substitution (the only form the Dockerfile's ARGs and FROMs may use).
fn substitute(text: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let Some(body) = after.strip_prefix('{') else {
            panic!("use ${{VAR}} in ARG/FROM lines: {text}");
        };
        let end = body.find('}').expect("unclosed ${");
        let name = &body[..end];
        let value = vars
            .get(name)
            .unwrap_or_else(|| panic!("{name} is used before it is declared: {text}"));
        out.push_str(value);
        rest = &body[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The image references of the FROM lines, with the global ARGs' defaults and `overrides`
/// (like --build-arg).
fn from_images(overrides: &[(&str, &str)]) -> Vec<(String, Option<String>)> {
    let mut vars: HashMap<String, String> = HashMap::new();
    let mut froms = Vec::new();
    let mut global = true;
    for i in dockerfile() {
        match i.keyword.as_str() {
            "ARG" if global => {
                let (name, default) = i.args.split_once('=').unwrap_or((&i.args, ""));
                let value = match overrides.iter().find(|(k, _)| *k == name) {
                    Some((_, v)) => (*v).to_owned(),
                    None => substitute(default, &vars),
                };
                vars.insert(name.to_owned(), value);
            }
            "FROM" => {
                global = false;
                let mut words = i.args.split_whitespace();
                let image = substitute(words.next().unwrap(), &vars);
                let stage = match (words.next(), words.next()) {
                    (Some(as_), Some(name)) if as_.eq_ignore_ascii_case("as") => {
                        Some(name.to_owned())
                    }
                    _ => None,
                };
                froms.push((image, stage));
            }
            _ => {}
        }
    }
    froms
}

/// The instructions of the stage named `name`.
fn stage<'a>(stages: &'a [(String, Vec<Instr>)], name: &str) -> &'a [Instr] {
    stages
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, instrs)| instrs.as_slice())
        .unwrap_or_else(|| panic!("no stage {name} in the Dockerfile"))
}

/// The instructions of each stage, by stage name.
fn stages() -> Vec<(String, Vec<Instr>)> {
    let mut stages: Vec<(String, Vec<Instr>)> = Vec::new();
    for i in dockerfile() {
        if i.keyword == "FROM" {
            let name = i.args.split_whitespace().nth(2).unwrap_or("?").to_owned();
            stages.push((name, Vec::new()));
        } else if let Some((_, list)) = stages.last_mut() {
            list.push(i);
        }
    }
    stages
}

#[test]
fn dockerfile_builds_on_doca_devel_and_runs_on_doca_full_rt() {
    // The DOCA flavour's two stages (the other stages are the roce flavour's).
    let images = |o: &[(&str, &str)]| -> Vec<String> {
        from_images(o)
            .into_iter()
            .filter(|(_, stage)| matches!(stage.as_deref(), Some("build" | "runtime")))
            .map(|(image, _)| image)
            .collect()
    };
    let stages = from_images(&[]);
    assert_eq!(
        stages
            .iter()
            .map(|(_, s)| s.as_deref().unwrap_or("-"))
            .collect::<Vec<_>>(),
        [
            "roce-binary-build",
            "roce-binary-context",
            "roce-binary",
            "roce",
            "build",
            "runtime"
        ],
        "the DOCA runtime stays the last stage: the default target"
    );
    assert_eq!(
        images(&[]),
        [
            "nvcr.io/nvidia/doca/doca:3.1.0-devel-host",
            "nvcr.io/nvidia/doca/doca:3.1.0-full-rt-host"
        ]
    );
    // BlueField (aarch64): the tags without -host.
    assert_eq!(
        images(&[("DOCA_VARIANT", "")]),
        [
            "nvcr.io/nvidia/doca/doca:3.1.0-devel",
            "nvcr.io/nvidia/doca/doca:3.1.0-full-rt"
        ]
    );
    assert_eq!(
        images(&[("DOCA_VARIANT", ""), ("DOCA_RUNTIME_FLAVOR", "base-rt")])[1],
        "nvcr.io/nvidia/doca/doca:3.1.0-base-rt"
    );
    // Other releases, and tags of another pattern.
    assert_eq!(
        images(&[("DOCA_VERSION", "3.0.0")]),
        [
            "nvcr.io/nvidia/doca/doca:3.0.0-devel-host",
            "nvcr.io/nvidia/doca/doca:3.0.0-full-rt-host"
        ]
    );
    assert_eq!(
        images(&[
            ("DOCA_DEVEL_TAG", "3.2.0-devel-ubuntu24.04-host"),
            ("DOCA_RUNTIME_TAG", "3.2.0-full-rt-ubuntu24.04-host")
        ]),
        [
            "nvcr.io/nvidia/doca/doca:3.2.0-devel-ubuntu24.04-host",
            "nvcr.io/nvidia/doca/doca:3.2.0-full-rt-ubuntu24.04-host"
        ]
    );
}

#[test]
fn dockerfile_roce_flavour_takes_its_base_and_binary_from_build_arguments() {
    let image_of = |o: &[(&str, &str)], stage: &str| -> String {
        from_images(o)
            .into_iter()
            .find(|(_, s)| s.as_deref() == Some(stage))
            .map(|(image, _)| image)
            .unwrap_or_else(|| panic!("no stage {stage}"))
    };
    assert_eq!(
        image_of(&[], "roce"),
        "docker.io/library/debian:bookworm-slim"
    );
    assert_eq!(
        image_of(&[("ROCE_BASE_IMAGE", "localhost/base:ci")], "roce"),
        "localhost/base:ci"
    );
    // The binary: built FROM the Rust image matching the pinned toolchain, or from the context.
    assert_eq!(
        image_of(&[], "roce-binary-build"),
        "docker.io/library/rust:1.95.0-slim-bookworm"
    );
    assert_eq!(image_of(&[], "roce-binary"), "roce-binary-build");
    assert_eq!(
        image_of(&[("ROCE_BINARY", "context")], "roce-binary"),
        "roce-binary-context"
    );
    assert_eq!(image_of(&[], "roce-binary-context"), "scratch");
}

fn runs(instrs: &[Instr]) -> Vec<&str> {
    instrs
        .iter()
        .filter(|i| i.keyword == "RUN")
        .map(|i| i.args.as_str())
        .collect()
}

/// "x.y.z" -> (x, y, z); "x.y" -> (x, y, 0).
fn version(v: &str) -> (u32, u32, u32) {
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap());
    (
        parts.next().unwrap(),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

fn manifest_value(manifest: &str, key: &str) -> Option<String> {
    manifest.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
    })
}

fn declares_feature(manifest: &str, feature: &str) -> bool {
    let mut in_features = false;
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_features = t == "[features]";
        } else if in_features && t.split('=').next().map(str::trim) == Some(feature) {
            return true;
        }
    }
    false
}

#[test]
fn dockerfile_build_stage_pins_rust_and_builds_with_require_doca() {
    let stages = stages();
    let build = stage(&stages, "build");
    let runs = runs(build);
    let all = runs.join("\n");

    // A pinned toolchain (x.y.z), not older than any rust-version in the workspace: a global
    // ARG (the roce flavour's Rust image uses it too), declared again in the build stage.
    let rust = dockerfile()
        .into_iter()
        .take_while(|i| i.keyword != "FROM")
        .find_map(|i| {
            (i.keyword == "ARG")
                .then(|| i.args.strip_prefix("RUST_VERSION=").map(str::to_owned))
                .flatten()
        })
        .expect("a global ARG RUST_VERSION=x.y.z");
    let rust = rust.as_str();
    assert!(
        build
            .iter()
            .any(|i| i.keyword == "ARG" && i.args == "RUST_VERSION"),
        "the build stage must declare ARG RUST_VERSION to use the global one"
    );
    assert!(
        rust.split('.').count() == 3 && rust.split('.').all(|p| p.parse::<u32>().is_ok()),
        "RUST_VERSION must be pinned to x.y.z, got {rust}"
    );
    for manifest in ["Cargo.toml", "lib/Cargo.toml", "doca-sys/Cargo.toml"] {
        if !repo().join(manifest).exists() {
            continue;
        }
        if let Some(msrv) = manifest_value(&read(manifest), "rust-version") {
            assert!(
                version(rust) >= version(&msrv),
                "RUST_VERSION {rust} is older than {manifest}'s rust-version {msrv}"
            );
        }
    }
    assert!(
        all.contains("rustup") && all.contains("--default-toolchain \"${RUST_VERSION}\""),
        "rustup must install ${{RUST_VERSION}}:\n{all}"
    );

    // The build, the conformance tests, both locked and with require-doca.
    let build_cmd = runs
        .iter()
        .find(|r| r.contains("cargo build"))
        .expect("a cargo build step");
    for part in ["--release", "--locked", "--features require-doca"] {
        assert!(
            build_cmd.contains(part),
            "cargo build lacks {part}: {build_cmd}"
        );
    }
    let test_cmd = runs
        .iter()
        .find(|r| r.contains("cargo test"))
        .expect("a cargo test step (doca-sys conformance)");
    for part in ["--locked", "-p doca-sys", "--features require-doca"] {
        assert!(
            test_cmd.contains(part),
            "cargo test lacks {part}: {test_cmd}"
        );
    }
    // What the crates' build scripts need: clang for bindgen over the DOCA headers; no cmake
    // (the verbs transport's verbs-sys needs nothing to build).
    let apt = runs
        .iter()
        .find(|r| r.contains("apt-get install"))
        .expect("an apt-get install step");
    assert!(
        !apt.split_whitespace().any(|w| w == "cmake"),
        "the build stage installs cmake, which no crate needs: {apt}"
    );
    for tool in ["clang", "libclang-dev", "pkg-config"] {
        assert!(
            apt.split_whitespace().any(|w| w == tool),
            "the build stage does not install {tool}: {apt}"
        );
    }
    // The build refuses a binary without the doca transport or built against the simulator.
    for part in ["^transports:.*doca", "none", "(sim"] {
        assert!(
            build_cmd.contains(part),
            "the --version check lacks {part}: {build_cmd}"
        );
    }

    // Both crates declare the feature the image is built with.
    assert!(
        declares_feature(&read("Cargo.toml"), "require-doca"),
        "Cargo.toml has no require-doca feature, which the Dockerfile builds with"
    );
    if repo().join("doca-sys/Cargo.toml").exists() {
        assert!(
            declares_feature(&read("doca-sys/Cargo.toml"), "require-doca"),
            "doca-sys/Cargo.toml has no require-doca feature"
        );
    }
}

#[test]
fn dockerfile_runtime_stage_holds_only_the_binary_and_entrypoint() {
    let stages = stages();
    let runtime = stage(&stages, "runtime");
    for i in runtime {
        assert!(
            [
                "COPY",
                "RUN",
                "SHELL",
                "ENV",
                "LABEL",
                "STOPSIGNAL",
                "ENTRYPOINT",
                "CMD",
                "WORKDIR"
            ]
            .contains(&i.keyword.as_str()),
            "unexpected {} in the runtime stage",
            i.keyword
        );
    }
    // Nothing in the runtime image downloads or installs anything.
    for r in runs(runtime) {
        for word in ["curl", "wget", "apt", "pip", "rustup", "cargo", "git "] {
            assert!(!r.contains(word), "runtime stage RUN uses {word}: {r}");
        }
    }
    let copies: Vec<&Instr> = runtime.iter().filter(|i| i.keyword == "COPY").collect();
    assert_eq!(copies.len(), 2, "{copies:?}");
    let bin_dest = copies
        .iter()
        .find_map(|c| {
            c.args
                .strip_prefix("--from=build /src/target/release/rdma-container ")
        })
        .expect("COPY --from=build of the release binary");
    let entry_dest = copies
        .iter()
        .find_map(|c| c.args.strip_prefix("docker/entrypoint.sh "))
        .expect("COPY docker/entrypoint.sh");

    // The entrypoint's default binary path is where the binary is copied to.
    assert!(
        read("docker/entrypoint.sh").contains(&format!("RDMA_CONTAINER_BIN:-{bin_dest}}}")),
        "docker/entrypoint.sh's default RDMA_CONTAINER_BIN is not {bin_dest}"
    );

    let only = |kw: &str| -> String {
        let found: Vec<&Instr> = runtime.iter().filter(|i| i.keyword == kw).collect();
        assert_eq!(found.len(), 1, "one {kw} expected: {found:?}");
        found[0].args.clone()
    };
    assert_eq!(only("ENTRYPOINT"), format!("[\"{entry_dest}\"]"));
    // No CMD: without arguments the entrypoint runs doctor (see
    // dockerfile_default_command_is_doctor_not_an_address).
    let cmds: Vec<&str> = runtime
        .iter()
        .filter(|i| i.keyword == "CMD")
        .map(|i| i.args.as_str())
        .collect();
    assert!(cmds.is_empty(), "the runtime stage has a CMD: {cmds:?}");
    // The binary handles SIGTERM (as PID 1 too): `docker stop` and the kubelet end it cleanly, 143.
    assert_eq!(only("STOPSIGNAL"), "SIGTERM");
    // A runtime image that lacks a library fails the build, not the first docker run.
    assert!(
        runs(runtime)
            .iter()
            .any(|r| r.contains("ldd") && r.contains("not found") && r.contains("exit 1")),
        "the runtime stage must check the binary's libraries with ldd"
    );
    // The verbs transport loads rdma-core with dlopen (invisible to ldd): checked separately.
    if read("Cargo.toml").contains("verbs-sys") {
        assert!(
            runs(runtime)
                .iter()
                .any(|r| r.contains("ldconfig -p") && r.contains("libibverbs.so.1")),
            "the runtime stage must check that libibverbs.so.1 (dlopen'd) is there"
        );
    }
}

/// The roce flavour is the DOCA runtime's twin: the same files at the same places, the same
/// ENTRYPOINT, CMD (none) and STOPSIGNAL, the same library checks minus DOCA, and only rdma-core
/// installed (the image itself is built and run by scripts/container-test.sh).
#[test]
fn dockerfile_roce_stage_mirrors_the_doca_runtime_without_doca() {
    let stages = stages();
    let (roce, runtime) = (stage(&stages, "roce"), stage(&stages, "runtime"));
    let args_of = |instrs: &[Instr], kw: &str| -> Vec<String> {
        instrs
            .iter()
            .filter(|i| i.keyword == kw)
            .map(|i| i.args.clone())
            .collect()
    };
    for kw in ["ENTRYPOINT", "CMD", "STOPSIGNAL"] {
        assert_eq!(args_of(roce, kw), args_of(runtime, kw), "{kw} differs");
    }
    let dest = |instrs: &[Instr], src: &str| -> String {
        args_of(instrs, "COPY")
            .into_iter()
            .find_map(|a| a.strip_prefix(src).map(|d| d.trim().to_owned()))
            .unwrap_or_else(|| panic!("no COPY {src}"))
    };
    assert_eq!(
        dest(roce, "--from=roce-binary /rdma-container"),
        dest(runtime, "--from=build /src/target/release/rdma-container")
    );
    assert_eq!(
        dest(roce, "docker/entrypoint.sh"),
        dest(runtime, "docker/entrypoint.sh")
    );
    let runs = runs(roce);
    let apt = runs
        .iter()
        .find(|r| r.contains("apt-get install"))
        .expect("rdma-core installed with apt");
    let packages: Vec<&str> = apt
        .split("--no-install-recommends")
        .nth(1)
        .and_then(|rest| rest.split("&&").next())
        .map(|list| list.split_whitespace().collect())
        .unwrap_or_default();
    assert_eq!(packages, ["libibverbs1", "librdmacm1", "ibverbs-providers"]);
    assert!(
        apt.contains("apt-get clean") && apt.contains("rm -rf /var/lib/apt/lists/*"),
        "the apt caches stay out of the image: {apt}"
    );
    let checks = runs.join("\n");
    for part in [
        "not found",
        "ldconfig -p",
        "libibverbs.so.1",
        "librdmacm.so.1",
        "mlx5",
        "rxe",
        "^DOCA: none",
    ] {
        assert!(
            checks.contains(part),
            "the roce stage does not check {part}"
        );
    }
}

/// `.dockerignore` semantics (the subset we use): patterns relative to the context root,
/// `*`/`?` within a segment, `**` for any number of segments, `!` re-includes, the last
/// matching pattern wins, and a path is excluded when it or a parent directory matches.
fn dockerignored(patterns: &[String], path: &str) -> bool {
    fn glob(p: &[&str], s: &[&str]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(&"**"), _) => glob(&p[1..], s) || (!s.is_empty() && glob(p, &s[1..])),
            (Some(pp), Some(ss)) => segment(pp.as_bytes(), ss.as_bytes()) && glob(&p[1..], &s[1..]),
            _ => false,
        }
    }
    fn segment(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => segment(&p[1..], s) || (!s.is_empty() && segment(p, &s[1..])),
            (Some(b'?'), Some(_)) => segment(&p[1..], &s[1..]),
            (Some(a), Some(b)) => a == b && segment(&p[1..], &s[1..]),
            _ => false,
        }
    }
    let parts: Vec<&str> = path.split('/').collect();
    let mut excluded = false;
    for pat in patterns {
        let (negate, pat) = match pat.strip_prefix('!') {
            Some(p) => (true, p),
            None => (false, pat.as_str()),
        };
        let pat: Vec<&str> = pat.trim_matches('/').split('/').collect();
        if (1..=parts.len()).any(|n| glob(&pat, &parts[..n])) {
            excluded = !negate;
        }
    }
    excluded
}

#[test]
fn dockerignore_keeps_build_output_out_and_sources_in() {
    let patterns: Vec<String> = read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    for out in [
        "target",
        "target/release/rdma-container",
        "doca-sys/target/debug/x",
        ".git/config",
        "build.log",
    ] {
        assert!(dockerignored(&patterns, out), "{out} should be ignored");
    }
    let mut needed = vec![
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
        "src/main.rs",
        "src/lib.rs",
        "docker/entrypoint.sh",
        "tests/packaging_scripts.rs",
        "tests/packaging_static.rs",
        "test-support/Cargo.toml",
        "test-support/src/lib.rs",
    ];
    if repo().join("doca-sys").exists() {
        needed.extend([
            "doca-sys/Cargo.toml",
            "doca-sys/build.rs",
            "doca-sys/src/lib.rs",
        ]);
    }
    for path in needed {
        assert!(
            !dockerignored(&patterns, path),
            "{path} must reach the build"
        );
    }
    // Every file the Dockerfile copies from the context exists and is not ignored.
    for i in dockerfile() {
        if i.keyword == "COPY" && !i.args.starts_with("--from") {
            let src = i.args.split_whitespace().next().unwrap();
            // dist/ holds a binary built beforehand (ROCE_BINARY=context), never committed.
            if src.starts_with("dist/") {
                assert!(
                    read(".gitignore").lines().any(|l| l == "/dist"),
                    "dist/ must be git-ignored"
                );
            } else if src != "." {
                assert!(repo().join(src).exists(), "COPY {src}: no such file");
                assert!(
                    !dockerignored(&patterns, src),
                    "COPY {src} is dockerignored"
                );
            }
        }
    }
    // The matcher itself.
    let p = |s: &[&str]| s.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    assert!(dockerignored(&p(&["**/target"]), "a/b/target/c"));
    assert!(!dockerignored(&p(&["*.log", "!keep.log"]), "keep.log"));
    assert!(!dockerignored(&p(&["target"]), "src/target"));
}

#[test]
fn compose_file_runs_server_and_client_with_rdma_access() {
    let text = read("docker/compose.yaml");
    for needle in [
        "network_mode: host",
        "- IPC_LOCK",
        "memlock:",
        "soft: -1",
        "hard: -1",
        "/dev/infiniband/rdma_cm:/dev/infiniband/rdma_cm",
        "/dev/infiniband/uverbs0",
        "profiles: [server]",
        "profiles: [client]",
        "\"--server\"",
        "\"--client\"",
        "stop_signal: SIGTERM",
    ] {
        assert!(text.contains(needle), "compose.yaml lacks {needle:?}");
    }

    // Its structure, where python3 with PyYAML is available (merge keys resolved).
    let script = r#"
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
for name in ("server", "client"):
    s = doc["services"][name]
    assert s["network_mode"] == "host", name
    assert "IPC_LOCK" in s["cap_add"], name
    assert s["ulimits"]["memlock"] == {"soft": -1, "hard": -1}, name
    assert any(d.endswith(":/dev/infiniband/rdma_cm") for d in s["devices"]), name
    assert any("uverbs" in d for d in s["devices"]), name
    assert s["profiles"] == [name], name
    assert s["command"][0] == "--" + name, name
print("compose structure ok")
"#;
    let yaml_ok = on_path("python3").is_some_and(|py| {
        Command::new(py)
            .args(["-c", "import yaml"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if yaml_ok {
        let mut cmd = Command::new("python3");
        cmd.args(["-c", script])
            .arg(repo().join("docker/compose.yaml"));
        let out = run(cmd);
        assert_eq!(out.code, Some(0), "{}", out.show());
    } else {
        skip_or_fail("the structural check: python3 with PyYAML is not installed");
    }
}

/// docker-compose's own validation of the compose file (it needs no engine for `config`).
#[test]
#[ignore = "needs docker-compose, which CI does not install: \
            cargo test --test packaging_static -- --ignored"]
fn compose_file_passes_docker_compose_config() {
    let Some(dc) = on_path("docker-compose") else {
        skip_or_fail("docker-compose is not installed");
        return;
    };
    for profile in ["server", "client"] {
        let mut cmd = Command::new(&dc);
        cmd.arg("-f").arg(repo().join("docker/compose.yaml")).args([
            "--profile",
            profile,
            "config",
            "-q",
        ]);
        let out = run(cmd);
        assert_eq!(out.code, Some(0), "docker-compose config: {}", out.show());
    }
}

#[test]
fn container_docs_cover_the_flags_build_args_and_env_vars() {
    // The container guide: the whole of docs/containers.md, and docs/bluefield.md for the
    // images of BlueField's Arm cores.
    let docs = read("docs/containers.md") + &read("docs/bluefield.md");
    let docs = docs.as_str();
    for needle in [
        "--network host --cap-add=IPC_LOCK --ulimit memlock=-1",
        "--device /dev/infiniband/uverbs0 --device /dev/infiniband/rdma_cm",
        "--target roce",
        "ROCE_BINARY=context",
        "scripts/container-test.sh",
        "--user 1000:1000",
        "--privileged --network host",
        "/sys/class/infiniband_verbs/",
        "docker buildx build --platform linux/arm64",
        "3.1.0-devel",
        "full-rt",
        "base-rt",
        "pf0hpf",
        "scripts/setup-soft-roce.sh",
        "scripts/check-rdma-readiness.sh",
        "docker/compose.yaml",
        "STOPSIGNAL",
        "tests/packaging_scripts.rs",
        "tests/packaging_static.rs",
    ] {
        assert!(
            docs.contains(needle),
            "docs/containers.md (or bluefield.md) lacks {needle:?}"
        );
    }
    // Every build argument and every entrypoint variable is documented.
    for i in dockerfile() {
        if i.keyword == "ARG" {
            let name = i.args.split('=').next().unwrap();
            assert!(
                docs.contains(name),
                "docs/containers.md does not document ARG {name}"
            );
        }
    }
    for var in env_vars(&read("docker/entrypoint.sh"), "RDMA_CONTAINER_") {
        assert!(
            docs.contains(&var),
            "docs/containers.md does not document {var}"
        );
    }
}

// ------------------------------------------------------------------------------------------
// The image's default command and its tags

/// A JSON-form (exec-form) instruction's words: `["a", "b"]`.
fn exec_form(args: &str) -> Vec<String> {
    serde_json::from_str(args).unwrap_or_else(|e| panic!("not the JSON (exec) form: {args}: {e}"))
}

/// Whether `text` holds an IPv4 address (`a.b.c.d`, with or without `:PORT`).
fn has_ipv4(text: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .any(|word| {
            let parts: Vec<&str> = word.split('.').collect();
            parts.len() == 4
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.len() <= 3 && p.parse::<u8>().is_ok())
        })
}

/// `docker run IMAGE` with no arguments must do something useful on any host: the image's
/// default command is `doctor`, never a session to a hard-coded address. A CMD of
/// `--server 192.168.200.13:5000` fails to bind everywhere but the reference's own DPU, and it
/// overrides (server) or conflicts with (client: exit 2) the RDMA_CONTAINER_SERVER/_CLIENT a
/// pod sets, so the manifests under deploy/ could not work either. Even `CMD ["doctor"]` would
/// turn those pods (variables, no args) into a doctor run, so the image stages have no CMD and
/// the entrypoint picks the default: doctor, or the session the variables describe.
#[test]
fn dockerfile_default_command_is_doctor_not_an_address() {
    assert!(has_ipv4(r#"["--server", "192.168.200.13:5000"]"#));
    assert!(!has_ipv4(r#"["doctor"]"#) && !has_ipv4("1.95.0 3.1.0"));

    let stages = stages();
    let entrypoint = read("docker/entrypoint.sh");
    for name in ["roce", "runtime"] {
        let instrs = stage(&stages, name);
        let entry: Vec<&Instr> = instrs
            .iter()
            .filter(|i| i.keyword == "ENTRYPOINT")
            .collect();
        assert_eq!(entry.len(), 1, "{name}: one ENTRYPOINT expected: {entry:?}");
        assert_eq!(
            exec_form(&entry[0].args),
            ["/usr/local/bin/rdma-container-entrypoint.sh"],
            "{name}: the ENTRYPOINT is the entrypoint script alone (arguments come from CMD \
             or docker run)"
        );
        let cmds: Vec<Vec<String>> = instrs
            .iter()
            .filter(|i| i.keyword == "CMD")
            .map(|i| exec_form(&i.args))
            .collect();
        assert!(
            cmds.is_empty(),
            "{name}: the default command is {cmds:?}: the image must have no CMD, so that \
             `docker run IMAGE` runs the entrypoint's default (doctor) and a pod configured by \
             RDMA_CONTAINER_SERVER/_CLIENT runs its session"
        );
    }
    // ENTRYPOINT clears the base image's CMD: the entrypoint gets no arguments, and then runs
    // doctor (its behaviour: tests/packaging_scripts.rs).
    assert!(
        entrypoint.contains("if [ \"$#\" -eq 0 ]; then") && entrypoint.contains("set -- doctor"),
        "docker/entrypoint.sh must run doctor when it gets no arguments"
    );
    // Nothing in the Dockerfile's CMD or ENTRYPOINT names an address or a session.
    for i in dockerfile() {
        if i.keyword == "CMD" || i.keyword == "ENTRYPOINT" {
            assert!(
                !has_ipv4(&i.args),
                "{} names an address: {}",
                i.keyword,
                i.args
            );
            for word in exec_form(&i.args) {
                assert!(
                    !["-s", "--server", "-c", "--client"].contains(&word.as_str())
                        && !word.starts_with("--server=")
                        && !word.starts_with("--client="),
                    "{} starts a session: {}",
                    i.keyword,
                    i.args
                );
            }
        }
    }
}

/// The program's version: `version` in Cargo.toml's `[package]`.
fn package_version() -> String {
    let toml = read("Cargo.toml");
    let mut in_package = false;
    for line in toml.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_package = t == "[package]";
        } else if in_package {
            if let Some((key, value)) = t.split_once('=') {
                if key.trim() == "version" {
                    return value.trim().trim_matches('"').to_owned();
                }
            }
        }
    }
    panic!("Cargo.toml's [package] has no version");
}

/// Every image tag `rdma-container:TAG` in `text`, with its line number. `rdma-container:`
/// followed by a space or nothing (prose: "rdma-container: the ...") is not a tag.
fn image_tags(text: &str) -> Vec<(usize, String)> {
    const NAME: &str = "rdma-container:";
    let mut tags = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for (at, _) in line.match_indices(NAME) {
            let mut tag: String = line[at + NAME.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "._-${}".contains(*c))
                .collect();
            // `${RDMA_IMAGE:-rdma-container:0.1.0}`: the brace closes the variable.
            while tag.ends_with('}') && tag.matches('}').count() > tag.matches('{').count() {
                tag.pop();
            }
            let tag = tag.trim_end_matches(['.', '-']).to_owned();
            if !tag.is_empty() {
                tags.push((n + 1, tag));
            }
        }
    }
    tags
}

/// The files that name image tags: README, docs, deploy, docker, scripts and the Dockerfile.
fn files_naming_image_tags() -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| {
                ["md", "yaml", "yml", "sh", "json", "toml", "env"]
                    .contains(&e.to_str().unwrap_or(""))
            }) {
                out.push(path);
            }
        }
    }
    let mut files = vec![
        repo().join("README.md"),
        repo().join("BENCHMARKS.md"),
        repo().join("Dockerfile"),
        repo().join("python/README.md"),
    ];
    for dir in ["docs", "deploy", "docker", "scripts"] {
        walk(&repo().join(dir), &mut files);
    }
    files.retain(|f| f.exists());
    files
}

/// Image tags follow the program's version (Cargo.toml's `version`): `VERSION` or
/// `VERSION-flavour` (`-dpu`, `-roce`, ...), wherever the README, the docs, the manifests, the
/// compose file, the Dockerfile or a script names one. A script may use `$VERSION` only if it
/// reads VERSION from Cargo.toml. So a version bump that forgets a tag fails here, and a tag
/// can no longer be mistaken for the DOCA release (3.1.0, the base image's tag).
#[test]
fn image_tags_follow_the_cargo_version() {
    let version = package_version();
    assert!(
        version.split('.').count() == 3 && version.split('.').all(|p| p.parse::<u32>().is_ok()),
        "Cargo.toml's version {version:?} is not x.y.z"
    );
    // The parser itself.
    assert_eq!(
        image_tags("  image: ${RDMA_IMAGE:-rdma-container:1.2.3}\nrdma-container: prose"),
        [(1, "1.2.3".to_owned())]
    );
    assert_eq!(
        image_tags("`docker build -t rdma-container:1.2.3-dpu .` and rdma-container:roce."),
        [(1, "1.2.3-dpu".to_owned()), (1, "roce".to_owned())]
    );

    let mut wrong = Vec::new();
    let mut seen = 0;
    let mut files_with_tags = std::collections::BTreeSet::new();
    for file in files_naming_image_tags() {
        let rel = file
            .strip_prefix(repo())
            .unwrap_or(&file)
            .display()
            .to_string();
        let Ok(text) = fs::read_to_string(&file) else {
            continue;
        };
        // A script may compute the tag from VERSION, if VERSION comes from Cargo.toml.
        let reads_version = text.contains("VERSION=$(") && text.contains("Cargo.toml");
        for (line, tag) in image_tags(&text) {
            seen += 1;
            files_with_tags.insert(rel.clone());
            // The soft-RoCE VM's local name for the image it loads from an OCI layout inside
            // the VM (scripts/softroce-vm/guest-container.sh): never built or pulled by a user.
            if tag == "vm" && rel.contains("softroce-vm") {
                continue;
            }
            let tag = if reads_version {
                tag.replace("${VERSION}", &version)
                    .replace("$VERSION", &version)
            } else {
                tag
            };
            let follows = tag == version
                || tag
                    .strip_prefix(&format!("{version}-"))
                    .is_some_and(|suffix| {
                        !suffix.is_empty() && !suffix.starts_with(|c: char| c.is_ascii_digit())
                    });
            if !follows {
                wrong.push(format!("{rel}:{line}: rdma-container:{tag}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "image tags that are not Cargo.toml's version {version} (or {version}-flavour):\n{}",
        wrong.join("\n")
    );
    // The scan found what it must (else it checks nothing).
    assert!(
        seen >= 20,
        "only {seen} image tags found: the scan is broken"
    );
    for must in [
        "README.md",
        "Dockerfile",
        "docs/containers.md",
        "docker/compose.yaml",
        "deploy/kubernetes/shared/server.yaml",
        "deploy/kubernetes/shared/client.yaml",
        "deploy/kubernetes/sriov/server.yaml",
        "deploy/kubernetes/sriov/client.yaml",
        "scripts/container-test.sh",
    ] {
        assert!(
            files_with_tags.contains(must),
            "{must} names no rdma-container image tag (the scan misses it?): {files_with_tags:?}"
        );
    }
    // The script that builds the image reads the version from Cargo.toml, not a copy of it.
    let script = read("scripts/container-test.sh");
    assert!(
        script.contains("Cargo.toml") && script.contains("rdma-container:$VERSION"),
        "scripts/container-test.sh must tag its image from Cargo.toml's version"
    );
}
