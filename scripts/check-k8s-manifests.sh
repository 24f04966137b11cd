#!/usr/bin/env bash
# Validates deploy/kubernetes/*/*.yaml: the Kubernetes kinds against the Kubernetes API schemas
# (the `kubernetes-validate` PyPI package, which ships them, in a venv outside the clone), the
# NetworkAttachmentDefinitions (a CRD: no schema there) by their CNI JSON, and our rules: no
# container privileged or with privilege escalation, IPC_LOCK added, an RDMA resource requested
# and limited, and every pod's Multus network defined with the resource the pod requests.
#
# usage: scripts/check-k8s-manifests.sh [--venv DIR] [--kubernetes-version X.Y.Z]
# Exit status: 0 valid; 1 a manifest is invalid; 2 usage; 3 the validator cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${HOME:-/root}/.cache/rdma-container/k8s-venv"
version=1.30.0
while [ "$#" -gt 0 ]; do
  case "$1" in
    --venv) venv=${2:?--venv needs a directory}; shift ;;
    --kubernetes-version) version=${2:?--kubernetes-version needs a version}; shift ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check-k8s-manifests: unknown option: $1" >&2; exit 2 ;;
  esac
  shift
done

if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  python3 -m venv "$venv" || { echo "check-k8s-manifests: cannot create a venv at $venv (python3-venv?)" >&2; exit 3; }
  "$venv/bin/pip" install --quiet --cache-dir "$(dirname "$venv")/pip" kubernetes-validate ||
    { echo "check-k8s-manifests: cannot install kubernetes-validate from PyPI" >&2; exit 3; }
fi

shopt -s nullglob
manifests=(deploy/kubernetes/*/*.yaml)
[ "${#manifests[@]}" -gt 0 ] || { echo "check-k8s-manifests: no manifests under deploy/kubernetes" >&2; exit 1; }

# The Kubernetes kinds, strictly (unknown fields rejected); the CRD's "no schema" is a warning
# here, checked below instead.
out=$("$venv/bin/kubernetes-validate" --strict -k "$version" "${manifests[@]}" 2>&1) || {
  printf '%s\n' "$out" >&2
  exit 1
}
printf '%s\n' "$out"

"$venv/bin/python" - "${manifests[@]}" <<'EOF'
import json, sys, yaml

failed = []
def fail(path, msg):
    failed.append(f"{path}: {msg}")

docs = []
for path in sys.argv[1:]:
    with open(path) as f:
        docs += [(path, d) for d in yaml.safe_load_all(f) if d]

networks = {}
for path, d in docs:
    if d.get("kind") != "NetworkAttachmentDefinition":
        continue
    if d.get("apiVersion") != "k8s.cni.cncf.io/v1":
        fail(path, "a NetworkAttachmentDefinition is k8s.cni.cncf.io/v1")
    name = d.get("metadata", {}).get("name")
    try:
        config = json.loads(d["spec"]["config"])
    except (KeyError, TypeError, ValueError) as e:
        fail(path, f"spec.config is not CNI JSON: {e}")
        continue
    if config.get("name") != name or "cniVersion" not in config:
        fail(path, "the CNI config needs cniVersion and the object's name")
    if "type" not in config and not config.get("plugins"):
        fail(path, "the CNI config needs a type or plugins")
    resource = d.get("metadata", {}).get("annotations", {}).get("k8s.v1.cni.cncf.io/resourceName")
    if not resource:
        fail(path, "no k8s.v1.cni.cncf.io/resourceName: the pod would get no RDMA device")
    networks[name] = resource

pods = 0
for path, d in docs:
    kind = d.get("kind")
    if kind == "Pod":
        meta, spec = d["metadata"], d["spec"]
    elif kind in ("Job", "Deployment", "StatefulSet", "DaemonSet"):
        meta, spec = d["spec"]["template"]["metadata"], d["spec"]["template"]["spec"]
    else:
        continue
    pods += 1
    if spec.get("hostNetwork"):
        fail(path, "hostNetwork: the RoCE address belongs on the Multus interface")
    wanted = json.loads(meta.get("annotations", {}).get("k8s.v1.cni.cncf.io/networks", "[]"))
    if not wanted:
        fail(path, "no Multus network (k8s.v1.cni.cncf.io/networks)")
    for c in spec.get("containers", []):
        sc = c.get("securityContext", {})
        if sc.get("privileged", False):
            fail(path, f"container {c['name']} is privileged")
        if sc.get("allowPrivilegeEscalation", True):
            fail(path, f"container {c['name']}: set allowPrivilegeEscalation: false")
        if "IPC_LOCK" not in sc.get("capabilities", {}).get("add", []):
            fail(path, f"container {c['name']} lacks the IPC_LOCK capability")
        res = c.get("resources", {})
        for net in wanted:
            resource = networks.get(net.get("name"))
            if resource is None:
                fail(path, f"network {net.get('name')} is not defined in deploy/kubernetes")
            elif not (res.get("requests", {}).get(resource) and res.get("limits", {}).get(resource)):
                fail(path, f"container {c['name']} does not request and limit {resource}")

if pods == 0:
    fail("deploy/kubernetes", "no pods")
if failed:
    print("\n".join(failed), file=sys.stderr)
    sys.exit(1)
print(f"check-k8s-manifests: {pods} pod templates and {len(networks)} networks follow the rules")
EOF
