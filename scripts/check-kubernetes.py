#!/usr/bin/env python3
"""Validate the rendered Kubernetes manifests (a multi-document YAML file)
offline: each object against the API schemas shipped by the
`kubernetes-validate` package (strict: unknown fields are errors), then the
rules a stasis node must keep: readiness on /readyz, liveness on /healthz,
a preStop hook that drains, /dev/kvm from the host, a grace period longer
than the drain, and every Secret key the pods read defined.

Usage: check-kubernetes.py RENDERED.yaml  |  check-kubernetes.py --self-test
"""
import copy
import sys

import kubernetes_validate
import yaml

K8S_VERSION = "1.29.0"


def schema_errors(objs):
    errs = []
    for o in objs:
        name = f"{o.get('kind')}/{o.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(o, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            errs.append(f"{name}: {e.message} at {'.'.join(map(str, e.path))}")
        except Exception as e:  # an unknown kind or version
            errs.append(f"{name}: {e}")
    return errs


def node_errors(objs):
    errs = []
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)
    secrets = {
        s["metadata"]["name"]: set(s.get("stringData", {})) | set(s.get("data", {}))
        for s in by_kind.get("Secret", [])
    }
    nodes = [s for s in by_kind.get("StatefulSet", []) + by_kind.get("DaemonSet", [])
             if s["metadata"]["name"] == "stasis-node"]
    if len(nodes) != 1:
        return ["exactly one StatefulSet or DaemonSet named stasis-node is needed"]
    pod = nodes[0]["spec"]["template"]["spec"]
    c = next((c for c in pod["containers"] if c["name"] == "stasis"), None)
    if c is None:
        return ["stasis-node has no container named stasis"]
    if c.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/readyz":
        errs.append("readiness must be httpGet /readyz (false while draining)")
    if c.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/healthz":
        errs.append("liveness must be httpGet /healthz")
    pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    if pre[:3] != ["stasis", "node", "drain"]:
        errs.append("the preStop hook must run `stasis node drain`")
    drain = [a for a in c.get("args", []) if a.startswith("--drain-on-stop-secs=")]
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if not drain:
        errs.append("serve needs --drain-on-stop-secs (SIGTERM drains)")
    else:
        within = int(pre[pre.index("--within-secs") + 1]) if "--within-secs" in pre else 60
        if grace <= within + int(drain[0].split("=", 1)[1]):
            errs.append(f"terminationGracePeriodSeconds {grace} must exceed the preStop drain and the stop's drain")
    kvm = [v for v in pod.get("volumes", []) if v.get("hostPath", {}).get("path") == "/dev/kvm"]
    mounted = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
    if not kvm or mounted.get(kvm[0]["name"]) != "/dev/kvm":
        errs.append("/dev/kvm must come from the host (hostPath) and be mounted at /dev/kvm")
    for ct in [x for o in objs if o["kind"] in ("StatefulSet", "DaemonSet", "Deployment")
               for x in o["spec"]["template"]["spec"]["containers"]]:
        for e in ct.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref and ref["key"] not in secrets.get(ref["name"], set()):
                errs.append(f"{ct['name']}: env {e['name']} reads {ref['name']}/{ref['key']}, which no Secret defines")
    return errs


def check(objs):
    return schema_errors(objs) + node_errors(objs)


def self_test(objs):
    """Each rule must catch its own breakage."""
    def broken(edit):
        o = copy.deepcopy(objs)
        node = next(x for x in o if x["metadata"]["name"] == "stasis-node")
        edit(node["spec"]["template"]["spec"])
        return check(o)

    c0 = lambda p: p["containers"][0]
    cases = {
        "readiness": lambda p: c0(p)["readinessProbe"]["httpGet"].update(path="/healthz"),
        "preStop": lambda p: c0(p).pop("lifecycle"),
        "kvm": lambda p: p.update(volumes=[v for v in p["volumes"] if v["name"] != "kvm"]),
        "grace": lambda p: p.update(terminationGracePeriodSeconds=30),
        "schema": lambda p: c0(p).update(imagePullPolicyy="Always"),
        "secret": lambda p: c0(p)["env"].append(
            {"name": "X", "valueFrom": {"secretKeyRef": {"name": "stasis-secrets", "key": "nope"}}}),
    }
    bad = [k for k, edit in cases.items() if not broken(edit)]
    return [f"self-test: breaking {k} went unnoticed" for k in bad]


def main():
    args = sys.argv[1:]
    test = "--self-test" in args
    path = [a for a in args if a != "--self-test"][0]
    with open(path) as f:
        objs = [o for o in yaml.safe_load_all(f) if o]
    errs = check(objs)
    if test and not errs:
        errs = self_test(objs)
    for e in errs:
        print(f"check-kubernetes: {e}", file=sys.stderr)
    if errs:
        sys.exit(1)
    kinds = sorted({o["kind"] for o in objs})
    print(f"check-kubernetes: {len(objs)} objects ({', '.join(kinds)}) valid against Kubernetes {K8S_VERSION}")


if __name__ == "__main__":
    main()
