#!/usr/bin/env bash
# Validates deploy/kubernetes/*.yaml and deploy/kubernetes/*/*.yaml: the Kubernetes kinds
# against the Kubernetes API schemas (the `kubernetes-validate` PyPI package, pinned to 1.37.0,
# which ships them, in a venv outside the clone), the custom resources (no schema there) by
# our rules, and our rules: no container privileged or with privilege escalation, IPC_LOCK added and its namespace
# at the privileged Pod Security level, an RDMA resource requested and limited, every pod's
# Multus network defined with the resource the pod requests, metrics a cluster can scrape, a
# readiness probe, a Job that retries, and the device plugin examples naming those resources.
#
# usage: scripts/check-k8s-manifests.sh [--venv DIR] [--kubernetes-version X.Y.Z]
#                                       [--rules-only] [--dir DIR]
#   --rules-only  our rules alone (python3 with PyYAML; no venv, no schemas): tests/kubernetes.rs
#   --dir DIR     check the manifests under DIR instead of deploy/kubernetes
# Exit status: 0 valid; 1 a manifest is invalid; 2 usage; 3 the validator cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${HOME:-/root}/.cache/rdma-container/k8s-venv"
version=1.30.0
validator_version=1.37.0
rules_only=0
dir=deploy/kubernetes
while [ "$#" -gt 0 ]; do
  case "$1" in
    --venv) venv=${2:?--venv needs a directory}; shift ;;
    --kubernetes-version) version=${2:?--kubernetes-version needs a version}; shift ;;
    --rules-only) rules_only=1 ;;
    --dir) dir=${2:?--dir needs a directory}; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check-k8s-manifests: unknown option: $1" >&2; exit 2 ;;
  esac
  shift
done

shopt -s nullglob
manifests=("$dir"/*.yaml "$dir"/*/*.yaml)
[ "${#manifests[@]}" -gt 0 ] || { echo "check-k8s-manifests: no manifests under $dir" >&2; exit 1; }

if [ "$rules_only" -eq 1 ]; then
  # The first python3 with PyYAML: the one on PATH, else the system's (Debian's python3-yaml
  # installs there, and another python3, such as a pyenv shim, may come first on PATH).
  python=
  for p in python3 /usr/bin/python3; do
    if "$p" -c 'import yaml' 2>/dev/null; then python=$p; break; fi
  done
  [ -n "$python" ] ||
    { echo "check-k8s-manifests: --rules-only needs python3 with PyYAML (python3-yaml)" >&2; exit 3; }
else
  # The validator is pinned (its schemas and strictness change between releases); a venv
  # holding another version is brought to this one.
  if [ ! -x "$venv/bin/pip" ]; then
    python3 -m venv "$venv" || { echo "check-k8s-manifests: cannot create a venv at $venv (python3-venv?)" >&2; exit 3; }
  fi
  if ! "$venv/bin/pip" show kubernetes-validate 2>/dev/null | grep -qx "Version: $validator_version"; then
    "$venv/bin/pip" install --quiet --cache-dir "$(dirname "$venv")/pip" "kubernetes-validate==$validator_version" ||
      { echo "check-k8s-manifests: cannot install kubernetes-validate $validator_version from PyPI" >&2; exit 3; }
  fi
  python="$venv/bin/python"

  # The Kubernetes kinds, strictly (unknown fields rejected).
  out=$("$venv/bin/kubernetes-validate" --strict -k "$version" "${manifests[@]}" 2>&1) || {
    printf '%s\n' "$out" >&2
    exit 1
  }
  printf '%s\n' "$out"
  # Custom resources: kubernetes-validate ships the Kubernetes API's schemas only, so it cannot
  # validate a CRD's object and just warns "Couldn't find schema". These are skipped there on
  # purpose and checked by the rules below instead; the warning for any other kind (a core kind
  # with a misspelt apiVersion, say) fails.
  crds='NetworkAttachmentDefinition k8s.cni.cncf.io/v1|PodMonitor monitoring.coreos.com/v1|SriovNetworkNodePolicy sriovnetwork.openshift.io/v1'
  unvalidated=$(printf '%s\n' "$out" |
    sed -n "s/.*Couldn't find schema for kind \([^ ]*\) with api version \([^ ]*\) .*/\1 \2/p" |
    grep -Ev "^($crds)\$" || true)
  if [ -n "$unvalidated" ]; then
    printf 'check-k8s-manifests: no schema for (a misspelt kind or apiVersion?):\n%s\n' "$unvalidated" >&2
    exit 1
  fi
fi

"$python" - "${manifests[@]}" <<'EOF'
import json, sys, yaml

failed = []
def fail(path, msg):
    failed.append(f"{path}: {msg}")

docs = []
for path in sys.argv[1:]:
    with open(path) as f:
        docs += [(path, d) for d in yaml.safe_load_all(f) if d]

# Kinds without a namespace; everything else here must name its namespace.
CLUSTER_SCOPED = {"Namespace"}
# Objects set up once per cluster by its administrator, in the namespaces of their projects.
CLUSTER_SETUP = {("ConfigMap", "kube-system"), ("SriovNetworkNodePolicy", None)}
PSA = "pod-security.kubernetes.io/enforce"

namespaces = {}
for path, d in docs:
    if d.get("kind") == "Namespace":
        meta = d.get("metadata", {})
        namespaces[meta.get("name")] = meta.get("labels", {}) or {}
if not namespaces:
    fail("deploy/kubernetes", "no Namespace object: the pods need one at the privileged Pod Security level")

def namespace_of(path, d):
    ns = d.get("metadata", {}).get("namespace")
    kind = d.get("kind")
    if kind in CLUSTER_SCOPED or (kind, ns) in CLUSTER_SETUP or (kind, None) in CLUSTER_SETUP:
        return ns
    if not ns:
        fail(path, f"{kind} {d.get('metadata', {}).get('name')} names no namespace")
    elif ns not in namespaces:
        fail(path, f"{kind} is in namespace {ns}, which is not defined here")
    return ns

networks = {}
for path, d in docs:
    if d.get("kind") != "NetworkAttachmentDefinition":
        continue
    namespace_of(path, d)
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
    networks[name] = (resource, config)

def env_of(c):
    return {e.get("name"): e.get("value") for e in c.get("env", [])}

pods = 0
pod_labels = []   # (namespace, labels, names of container ports)
for path, d in docs:
    kind = d.get("kind")
    if kind == "Pod":
        meta, spec = d["metadata"], d["spec"]
    elif kind in ("Job", "Deployment", "StatefulSet", "DaemonSet"):
        meta, spec = d["spec"]["template"]["metadata"], d["spec"]["template"]["spec"]
    else:
        continue
    pods += 1
    ns = namespace_of(path, d)
    if spec.get("hostNetwork"):
        fail(path, "hostNetwork: the RoCE address belongs on the Multus interface")
    annotations = meta.get("annotations", {}) or {}
    wanted = json.loads(annotations.get("k8s.v1.cni.cncf.io/networks", "[]"))
    if not wanted:
        fail(path, "no Multus network (k8s.v1.cni.cncf.io/networks)")
    port_names = set()
    for c in spec.get("containers", []):
        sc = c.get("securityContext", {})
        if sc.get("privileged", False):
            fail(path, f"container {c['name']} is privileged")
        if sc.get("allowPrivilegeEscalation", True):
            fail(path, f"container {c['name']}: set allowPrivilegeEscalation: false")
        caps = sc.get("capabilities", {})
        if "IPC_LOCK" not in caps.get("add", []):
            fail(path, f"container {c['name']} lacks the IPC_LOCK capability")
        elif namespaces.get(ns, {}).get(PSA) != "privileged":
            fail(path, f"container {c['name']} adds IPC_LOCK, which only the privileged Pod Security "
                       f"level allows, and namespace {ns} does not enforce it ({PSA}: privileged)")
        if "ALL" not in caps.get("drop", []):
            fail(path, f"container {c['name']}: drop ALL other capabilities")
        res = c.get("resources", {})
        for net in wanted:
            resource = networks.get(net.get("name"), (None, None))[0]
            if resource is None:
                fail(path, f"network {net.get('name')} is not defined in deploy/kubernetes")
            elif not (res.get("requests", {}).get(resource) and res.get("limits", {}).get(resource)):
                fail(path, f"container {c['name']} does not request and limit {resource}")
        # Metrics a cluster can scrape: on every address (a bare port is 127.0.0.1 only), a
        # container port named "metrics" with that port, and the pod annotated for it.
        metrics = env_of(c).get("RDMA_CONTAINER_METRICS")
        ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
        port_names |= {n for n in ports if n}
        if not metrics or ":" not in metrics:
            fail(path, f"container {c['name']}: set RDMA_CONTAINER_METRICS to 0.0.0.0:PORT "
                       "(a bare port listens on 127.0.0.1, out of a scrape's reach)")
        else:
            host, _, port = metrics.rpartition(":")
            if host.startswith("127.") or host in ("localhost", "[::1]"):
                fail(path, f"container {c['name']}: RDMA_CONTAINER_METRICS {metrics} is loopback")
            if str(ports.get("metrics")) != port:
                fail(path, f"container {c['name']}: no container port named metrics with port {port}")
            if annotations.get("prometheus.io/scrape") != "true" or annotations.get("prometheus.io/port") != port:
                fail(path, f"pod of container {c['name']}: annotate prometheus.io/scrape \"true\" and "
                           f"prometheus.io/port \"{port}\"")
        # Ready only while RDMA is usable: doctor --require-rdma exits 5 otherwise.
        probe = c.get("readinessProbe", {}).get("exec", {}).get("command", [])
        if not (any(w.endswith("rdma-container") for w in probe) and "doctor" in probe
                and "--require-rdma" in probe):
            fail(path, f"container {c['name']}: readinessProbe exec rdma-container doctor --require-rdma")
    pod_labels.append((ns, meta.get("labels", {}) or {}, port_names))
    if kind == "Job":
        policy, backoff = spec.get("restartPolicy"), d["spec"].get("backoffLimit", 6)
        if policy not in ("Never", "OnFailure"):
            fail(path, f"a Job's pods restart Never or OnFailure, not {policy}")
        if policy == "Never" and backoff < 1:
            fail(path, "restartPolicy Never with backoffLimit 0: a failed client is never retried")
        if d["spec"].get("podFailurePolicy") and policy != "Never":
            fail(path, "a podFailurePolicy needs restartPolicy Never")

monitors = 0
for path, d in docs:
    if d.get("kind") != "PodMonitor":
        continue
    monitors += 1
    ns = namespace_of(path, d)
    if d.get("apiVersion") != "monitoring.coreos.com/v1":
        fail(path, "a PodMonitor is monitoring.coreos.com/v1")
    spec = d.get("spec", {})
    selector = spec.get("selector", {}).get("matchLabels", {})
    watched = spec.get("namespaceSelector", {}).get("matchNames", [ns])
    endpoints = [e.get("port") for e in spec.get("podMetricsEndpoints", [])]
    selected = [ports for pns, labels, ports in pod_labels
                if pns in watched and selector and all(labels.get(k) == v for k, v in selector.items())]
    if not selected:
        fail(path, f"the PodMonitor selects no pod here ({selector} in {watched})")
    if not endpoints:
        fail(path, "the PodMonitor has no podMetricsEndpoints")
    for port in endpoints:
        if any(port not in ports for ports in selected):
            fail(path, f"a pod the PodMonitor selects has no container port named {port}")

def resources_of_kind(kind):
    return {r for r, c in networks.values() if r and (kind == "any" or kind(c))}

for path, d in docs:
    kind, meta = d.get("kind"), d.get("metadata", {})
    if kind == "SriovNetworkNodePolicy":
        if d.get("apiVersion") != "sriovnetwork.openshift.io/v1":
            fail(path, "a SriovNetworkNodePolicy is sriovnetwork.openshift.io/v1")
        spec = d.get("spec", {})
        if spec.get("isRdma") is not True:
            fail(path, "isRdma: true, or the VFs come without their RDMA devices")
        if spec.get("deviceType", "netdevice") != "netdevice":
            fail(path, "deviceType netdevice: RDMA VFs stay with the kernel driver")
        if not (isinstance(spec.get("numVfs"), int) and spec["numVfs"] >= 1):
            fail(path, "numVfs of at least 1")
        if not spec.get("nicSelector") or not spec.get("nodeSelector"):
            fail(path, "a nicSelector and a nodeSelector")
        suffixes = {r.split("/", 1)[-1] for r in resources_of_kind("any")}
        if spec.get("resourceName") not in suffixes:
            fail(path, f"resourceName {spec.get('resourceName')} is not the resource of a network "
                       f"here ({sorted(suffixes)})")
    elif kind == "ConfigMap" and meta.get("name") == "rdma-devices":
        try:
            config = json.loads(d.get("data", {})["config.json"])
            entries = config["configList"]
        except (KeyError, TypeError, ValueError) as e:
            fail(path, f"config.json with a configList: {e}")
            continue
        masters = set()
        for r, c in networks.values():
            masters |= {c.get("master")} | {p.get("master") for p in c.get("plugins", [])}
        made = set()
        for e in entries:
            if not e.get("resourceName") or not isinstance(e.get("rdmaHcaMax"), int):
                fail(path, "each configList entry needs resourceName and rdmaHcaMax")
            if bool(e.get("selectors")) == bool(e.get("devices")):
                fail(path, "each configList entry needs selectors or devices (not both)")
            made.add(f"{e.get('resourcePrefix') or 'rdma'}/{e.get('resourceName')}")
            names = e.get("selectors", {}).get("ifNames") or e.get("devices") or []
            if names and not masters & set(names):
                fail(path, f"ifNames {names} include no network's master ({sorted(m for m in masters if m)})")
        macvlan = {r for r, c in networks.values() if r and c.get("type") == "macvlan"}
        for r in sorted(macvlan - made):
            fail(path, f"the shared device plugin's configuration makes no resource {r}")
    elif kind == "ConfigMap":
        namespace_of(path, d)

if pods == 0:
    fail("deploy/kubernetes", "no pods")
if failed:
    print("\n".join(failed), file=sys.stderr)
    sys.exit(1)
print(f"check-k8s-manifests: {pods} pod templates, {len(networks)} networks, {len(namespaces)} "
      f"namespace(s) and {monitors} PodMonitor(s) follow the rules")
EOF
