//! `scripts/kube-play.py`: what podman plays in place of the shipped Kubernetes YAML, checked
//! without podman (scripts/container-test.sh's `kube_play` and the soft-RoCE VM's
//! `container_kube` play it for real). Every substitution must be made and said, and nothing
//! else changed.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::{repo, skip_or_fail};

/// A python3 with PyYAML (the script's only import beyond the standard library).
fn python_with_yaml() -> Option<String> {
    ["python3", "/usr/bin/python3"].into_iter().find_map(|p| {
        let ok = Command::new(p)
            .args(["-c", "import yaml"])
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| p.to_owned())
    })
}

/// Runs `scripts/kube-play.py --out OUT ARGS...` with `python`.
fn kube_play(python: &str, out: &Path, args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(python)
        .arg(repo().join("scripts/kube-play.py"))
        .arg("--out")
        .arg(out)
        .args(args)
        .output()
        .expect("python3 runs")
}

#[test]
fn the_shipped_pods_become_playable_pods_and_each_substitution_is_said() {
    let Some(python) = python_with_yaml() else {
        skip_or_fail("no python3 with PyYAML (apt-get install python3-yaml)");
        return;
    };
    let out = tempfile::tempdir().expect("dir");
    let shared = repo().join("deploy/kubernetes/shared");
    let (server, client) = (shared.join("server.yaml"), shared.join("client.yaml"));
    let run = kube_play(
        &python,
        out.path(),
        &[
            "--device".as_ref(),
            "/dev/null:/dev/infiniband/uverbs0".as_ref(),
            "--env".as_ref(),
            "RDMA_CONTAINER_REQUIRE_RDMA=false".as_ref(),
            server.as_os_str(),
            client.as_os_str(),
        ],
    );
    let said = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    for line in [
        "SUBSTITUTED rdma-container-client: Job played as a Pod",
        "NETNS rdma-container-server net1 10.56.0.10/24",
        "NETNS rdma-container-client net1 10.56.0.11/24",
        "IMAGE rdma-container-server rdma-container:",
        "PROBE rdma-container-server server [\"/usr/local/bin/rdma-container\", \"doctor\", \"--require-rdma\"]",
        "SUBSTITUTED rdma-container-server: rdma/roce_shared -> device nodes /dev/null:/dev/infiniband/uverbs0",
        "SUBSTITUTED rdma-container-server: env RDMA_CONTAINER_REQUIRE_RDMA='true' -> 'false'",
    ] {
        assert!(said.contains(line), "not said: {line}\n{said}");
    }
    for pod in ["rdma-container-server", "rdma-container-client"] {
        let yaml = fs::read_to_string(out.path().join(format!("{pod}.yaml"))).expect("pod yaml");
        assert!(yaml.contains("kind: Pod"), "{pod}:\n{yaml}");
        for gone in [
            "downwardAPI",
            "containerPort",
            "kind: Job",
            "k8s.v1.cni.cncf.io/networks",
        ] {
            assert!(!yaml.contains(gone), "{pod} still has {gone}:\n{yaml}");
        }
        for kept in [
            "type: CharDevice",
            "mountPath: /dev/infiniband/uverbs0",
            "IPC_LOCK",
            "readinessProbe",
            "RDMA_CONTAINER_METRICS",
        ] {
            assert!(yaml.contains(kept), "{pod} lacks {kept}:\n{yaml}");
        }
        let annotations = fs::read_to_string(
            out.path()
                .join(format!("{pod}-podnetinfo"))
                .join("annotations"),
        )
        .expect("the downward API's file");
        assert!(
            annotations.contains("k8s.v1.cni.cncf.io/network-status=\"[")
                && annotations.contains("\\\"interface\\\": \\\"net1\\\"")
                && annotations.contains("prometheus.io/port=\"9464\""),
            "{annotations}"
        );
    }
}

/// A manifest that is not YAML (or not there) ends the script with one line naming the file,
/// never a Python traceback; a document that is not a mapping is skipped with a line.
#[test]
fn a_manifest_that_is_not_yaml_is_named_in_one_line_without_a_traceback() {
    let Some(python) = python_with_yaml() else {
        skip_or_fail("no python3 with PyYAML (apt-get install python3-yaml)");
        return;
    };
    let dir = tempfile::tempdir().expect("dir");
    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, "kind: Pod\nspec: [\n").expect("write");
    let missing = dir.path().join("missing.yaml");
    let binary = dir.path().join("binary.yaml");
    std::fs::write(&binary, b"kind: Pod\n\xff\xfe\n").expect("write");
    for manifest in [&broken, &missing, &binary] {
        let run = kube_play(&python, &dir.path().join("out"), &[manifest.as_os_str()]);
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{err}");
        assert!(
            err.starts_with(&format!("kube-play: {}: ", manifest.display())),
            "{err}"
        );
        assert!(!err.contains("Traceback"), "{err}");
    }
    let scalar = dir.path().join("scalar.yaml");
    std::fs::write(&scalar, "just a string\n---\n").expect("write");
    let run = kube_play(&python, &dir.path().join("out"), &[scalar.as_os_str()]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(err.contains("not a mapping is not played"), "{err}");
}
