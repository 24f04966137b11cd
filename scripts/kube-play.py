#!/usr/bin/env python3
"""kube-play.py: turns the shipped Kubernetes manifests into what `podman kube play` can run.

podman plays Pods without a cluster: no device plugin, no Multus, no downward API, and podman
4.x plays no Job. Each of those is substituted by what the cluster would have given the pod,
and every substitution is printed ("SUBSTITUTED <pod>: ..."), so that a reader knows exactly
what ran:

  Job              -> its pod template, played as a Pod named after the Job (podman < 5 has no
                      Job; the template's restartPolicy, containers and volumes are kept)
  rdma/... request -> the device nodes the device plugin would mount, as hostPath CharDevice
                      volumes (podman gives them to the container as devices); the request
                      itself is left in place (podman ignores extended resources)
  downwardAPI      -> a hostPath directory holding the file the downward API would write: the
                      pod's annotations, one key="Go-quoted value" per line, with Multus'
                      network-status for the networks the pod asks for (as Multus writes it
                      for a macvlan network: interface, ips, no device-info)
  Multus network   -> printed as "NETNS <pod> <interface> <ip/prefix>" lines: the caller runs
                      the pod with podman's host network inside a namespace whose RoCE netdev
                      has that address (what Multus' macvlan gives the pod as net1); the
                      request annotation itself is left out of the played pod (podman 4.x
                      refuses annotation values over 63 characters)
  ports            -> left out: the pod runs with podman's host network of its namespace,
                      where podman maps no ports (the port is the namespace's own)
  memory (--no-memory-limit)
                   -> left out where the runtime has no memory controller (the soft-RoCE VM:
                      its kernel has none on cgroup v1, and podman 4.3.1 starts no pod on
                      cgroup2 with the cgroupfs manager)
  env (--env)      -> a value replaced, e.g. RDMA_CONTAINER_REQUIRE_RDMA=false on a host
                      without an RDMA device

The readiness probe stays in the YAML: podman 4.x ignores it, so the caller runs its command
with `podman exec` (printed as "PROBE <pod> <container> <argv as JSON>").

usage: kube-play.py --out DIR [--device NODE[:PATH]]... [--interface NAME] [--env NAME=VALUE]...
                    [--play-dir PATH] [--no-memory-limit] MANIFEST...
Writes DIR/<pod>.yaml for each Pod or Job and DIR/<pod>-podnetinfo/annotations; prints the
substitutions, the NETNS, IMAGE and PROBE lines on stdout. --play-dir: where DIR will be on
the machine that plays the pods (the hostPath of the annotations file), e.g. in a VM.
Exit status 0, 1 for a manifest it cannot turn into a pod, 2 for usage.
"""

import argparse
import json
import os
import sys

import yaml

NETWORKS_KEY = "k8s.v1.cni.cncf.io/networks"
NETWORK_STATUS_KEY = "k8s.v1.cni.cncf.io/network-status"


def go_quote(text):
    """The downward API writes each annotation as key="value" with Go's %q quoting; for the
    ASCII text of these manifests that is JSON's string quoting."""
    return json.dumps(text, ensure_ascii=True)


def pod_of(doc, say):
    """(name, pod spec, pod metadata) of a Pod, or of a Job's template; None for other kinds."""
    kind = doc.get("kind")
    if kind == "Pod":
        return doc["metadata"]["name"], doc["spec"], doc["metadata"]
    if kind == "Job":
        name = doc["metadata"]["name"]
        template = doc["spec"]["template"]
        meta = dict(template.get("metadata") or {})
        meta["name"] = name
        if doc["metadata"].get("namespace"):
            meta["namespace"] = doc["metadata"]["namespace"]
        say(name, "Job played as a Pod from its template (podman 4.x plays no Job; "
            "the Job's backoffLimit and podFailurePolicy are not modelled)")
        return name, template["spec"], meta
    return None


def requested_networks(meta):
    text = (meta.get("annotations") or {}).get(NETWORKS_KEY)
    if not text:
        return []
    return json.loads(text)


def substitute(name, spec, meta, args, out, say):
    networks = requested_networks(meta)
    for net in networks:
        for ip in net.get("ips", []):
            print(f"NETNS {name} {net.get('interface', 'net1')} {ip}")
    status = [{"name": f"{meta.get('namespace', 'default')}/{n['name']}",
               "interface": args.interface or n.get("interface", "net1"),
               "ips": [ip.split("/")[0] for ip in n.get("ips", [])],
               "dns": {}} for n in networks]
    annotations = dict(meta.get("annotations") or {})
    if status:
        annotations[NETWORK_STATUS_KEY] = json.dumps(status, indent=4)
        # consumed here: podman 4.x refuses an annotation value over 63 characters
        del meta["annotations"][NETWORKS_KEY]
        say(name, f"Multus network {', '.join(n['name'] for n in networks)} -> a network "
            "namespace whose netdev has the address asked for (see NETNS); the request "
            "annotation is left out of the played pod (podman 4.x refuses values over 63 characters)")
    volumes = spec.get("volumes") or []
    for vol in volumes:
        if "downwardAPI" not in vol:
            continue
        directory = os.path.join(os.path.abspath(out), f"{name}-podnetinfo")
        os.makedirs(directory, exist_ok=True)
        played = os.path.join(args.play_dir or os.path.abspath(out), f"{name}-podnetinfo")
        for item in vol["downwardAPI"].get("items", []):
            if item.get("fieldRef", {}).get("fieldPath") != "metadata.annotations":
                print(f"kube-play: {name}: downwardAPI item {item} is not modelled", file=sys.stderr)
                sys.exit(1)
            with open(os.path.join(directory, item["path"]), "w", encoding="ascii") as f:
                for key in sorted(annotations):
                    f.write(f"{key}={go_quote(annotations[key])}\n")
        del vol["downwardAPI"]
        vol["hostPath"] = {"path": played, "type": "Directory"}
        say(name, f"downwardAPI volume {vol['name']} -> hostPath {played} (the pod's "
            f"annotations{' with Multus network-status' if status else ''}, as the downward API writes them)")
    for c in spec.get("containers", []):
        wanted = [r for r in (c.get("resources", {}).get("limits") or {}) if "/" in r]
        if wanted and args.device:
            mounts = c.setdefault("volumeMounts", [])
            for i, device in enumerate(args.device):
                host, _, inside = device.partition(":")
                vname = f"device-plugin-{i}"
                volumes.append({"name": vname, "hostPath": {"path": host, "type": "CharDevice"}})
                mounts.append({"name": vname, "mountPath": inside or host})
            spec["volumes"] = volumes
            say(name, f"{', '.join(wanted)} -> device nodes {' '.join(args.device)} "
                "(hostPath CharDevice: what the device plugin mounts)")
        if args.no_memory_limit:
            for part in ("requests", "limits"):
                if c.get("resources", {}).get(part, {}).pop("memory", None) is not None:
                    say(name, f"resources.{part}.memory left out (--no-memory-limit: no memory "
                        "controller where the pod runs)")
        for env in c.get("env", []):
            if env["name"] in args.env:
                say(name, f"env {env['name']}={env.get('value')!r} -> {args.env[env['name']]!r}")
                env["value"] = args.env[env["name"]]
        ports = c.pop("ports", None)
        if ports:
            say(name, f"containerPort {', '.join(str(p['containerPort']) for p in ports)} left out "
                "(podman maps no ports with host networking; the pod's namespace has the port)")
        print(f"IMAGE {name} {c['image']}")
        probe = c.get("readinessProbe", {}).get("exec", {}).get("command")
        if probe:
            print(f"PROBE {name} {c['name']} {json.dumps(probe)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", action="append", default=[], metavar="NODE[:PATH]",
                        help="a device node the device plugin would mount, at PATH in the "
                        "container (default: the same path); repeat")
    parser.add_argument("--interface", help="the netdev named in network-status (default: "
                        "the interface the pod's network annotation asks for)")
    parser.add_argument("--play-dir", help="where DIR is on the machine that plays the pods "
                        "(default: DIR itself)")
    parser.add_argument("--no-memory-limit", action="store_true",
                        help="leave out the containers' memory requests and limits (where the "
                        "runtime has no memory controller to set them with)")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE (repeat)")
    parser.add_argument("manifests", nargs="+")
    args = parser.parse_args()
    try:
        args.env = dict(e.split("=", 1) for e in args.env)
    except ValueError:
        parser.error("--env takes NAME=VALUE")
    os.makedirs(args.out, exist_ok=True)

    def say(pod, text):
        print(f"SUBSTITUTED {pod}: {text}")

    for path in args.manifests:
        try:
            with open(path, encoding="utf-8") as f:
                docs = list(yaml.safe_load_all(f))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
            sys.exit(f"kube-play: {path}: cannot read it as YAML (UTF-8): {e}")
        for doc in docs:
            if not isinstance(doc, dict):
                if doc:
                    print(f"kube-play: {path}: a document that is not a mapping is not "
                          "played", file=sys.stderr)
                continue
            found = pod_of(doc, say)
            if found is None:
                print(f"kube-play: {path}: kind {doc.get('kind')} is not played (not a Pod "
                      "or Job)", file=sys.stderr)
                continue
            name, spec, meta = found
            substitute(name, spec, meta, args, args.out, say)
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
            with open(os.path.join(args.out, f"{name}.yaml"), "w", encoding="utf-8") as f:
                yaml.safe_dump(pod, f, sort_keys=False)


if __name__ == "__main__":
    main()
