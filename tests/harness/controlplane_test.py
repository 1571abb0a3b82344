"""A real control plane (tests/harness/controlplane.py) from a PKI `nodeagent mint` made, judging
what the minter makes: the CAPI admin kubeconfig authenticates as kubernetes-admin, a
`mint kubeconfig` user as itself, the minted bootstrap-token Secret is accepted (the
bootstrapsigner signs cluster-info for it), and real `kubeadm join --dry-run` with the
minted worker bundle's JoinConfiguration (token, CA hash, endpoint) discovers the real
cluster and exits 0. Then: every listener was on 127.0.0.1, every process is gone after stop.
Prints a line per check and `N passed, N failed`; exits 1 on any failure."""

import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from harness import controlplane as cpl, qemu as q, scenarios as sc

passed, failed = 0, 0


def check(cond, what, detail=""):
    global passed, failed
    print(f"{'PASS' if cond else 'FAIL'} {what}" + (f"\n    {detail}" if detail and not cond else ""), flush=True)
    passed += bool(cond)
    failed += not cond


def run(*cmd, **kw):
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({out.returncode}): {out.stderr.strip()}")
    return out.stdout


def whoami(cp, kubeconfig):
    out = cp.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig, check=False)
    if out.returncode != 0:
        return None, out.stderr.strip()
    info = json.loads(out.stdout)["status"]["userInfo"]
    return (info.get("username"), sorted(info.get("groups", []))), ""


def join_config(nodeagent, bundle, work, node):
    """The JoinConfiguration nodeagent would write on `node`: the bundle's userdata rendered
    by `nodeagent render` against its metadata, then its /run/kubeadm file."""
    facts = os.path.join(work, "facts.yaml")
    with open(facts, "w") as f:
        f.write(f"hostname: {node}\nlocal-ipv4: 10.0.2.15\n")
    rendered = run(nodeagent, "render", "--transport", f"dir:{bundle}", "--facts", facts)
    files = sc.cabpk_write_files(rendered)
    return files["/run/kubeadm/kubeadm-join-config.yaml"][1]


def main():
    t0 = time.monotonic()
    nodeagent = q.cargo_build("nodeagent")
    bindir = cpl.k8s_bin()
    work = os.path.join(q.REPO, "target", "k8s-runs", "controlplane-" + time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(work)
    pki = os.path.join(work, "pki")
    run(nodeagent, "mint", "pki", "--cluster", "demo", "--out", pki)
    cp = cpl.ControlPlane(pki, os.path.join(work, "cp"), cluster="demo", bindir=bindir)
    ep = cp.endpoint
    secrets = os.path.join(work, "secrets.yaml")
    run(nodeagent, "mint", "secrets", "--cluster", "demo", "--namespace", "default", "--from", pki,
        "--endpoint", ep, "--out", secrets)
    with cp:
        # 1. CAPI's Secrets apply; the -kubeconfig one is the cluster admin.
        cp.kubectl("apply", "-f", secrets)
        value = cp.kubectl("get", "secret", "demo-kubeconfig", "-o", "jsonpath={.data.value}").stdout
        admin = os.path.join(work, "demo-admin.conf")
        with open(admin, "wb") as f:
            f.write(base64.b64decode(value))
        who, err = whoami(cp, admin)
        check(who == ("kubernetes-admin", sorted(["system:masters", "system:authenticated"])),
              f"minted admin kubeconfig authenticates as kubernetes-admin/system:masters: {who}", err)
        nodes = cp.kubectl("get", "nodes", "-o", "name", kubeconfig=admin, check=False)
        check(nodes.returncode == 0, "the minted admin kubeconfig is authorized (kubectl get nodes)", nodes.stderr)

        # 2. A user kubeconfig from `mint kubeconfig`.
        alice = os.path.join(work, "alice.conf")
        run(nodeagent, "mint", "kubeconfig", "--pki", pki, "--cluster", "demo", "--endpoint", ep,
            "--user", "alice", "--group", "devs", "--out", alice)
        who, err = whoami(cp, alice)
        check(who == ("alice", sorted(["devs", "system:authenticated"])), f"mint kubeconfig user: {who}", err)

        # 3. The minted bootstrap-token Secret, accepted and signed into cluster-info.
        token = run(nodeagent, "mint", "token").strip()
        manifest = run(nodeagent, "mint", "token", "--secret", "--ttl", "24h", "--token", token)
        try:
            token_id = cp.add_token_secret(manifest)
            check(token_id == token.split(".")[0], f"minted token Secret accepted: cluster-info signed for {token_id}")
        except RuntimeError as e:
            check(False, "minted token Secret accepted", str(e))

        # 4. Real token discovery with the minted worker bundle (token + CA hash + endpoint).
        bundles = os.path.join(work, "bundles")
        run(nodeagent, "mint", "bootstrap", "--role", "worker", "--cluster", "demo", "--node", "md-0",
            "--endpoint", ep, "--kubernetes-version", cpl.K8S_VERSION, "--pki", pki, "--token", token,
            "--out", bundles)
        bundle = os.path.join(bundles, "md-0") if os.path.isdir(os.path.join(bundles, "md-0")) else bundles
        join = os.path.join(work, "join.yaml")
        with open(join, "w") as f:
            f.write(join_config(nodeagent, bundle, work, "md-0"))
        hashes = re.findall(r"sha256:[0-9a-f]{64}", open(join).read())
        check(hashes == [run(nodeagent, "mint", "hash", "--ca", os.path.join(pki, "ca.crt")).strip()],
              f"the bundle pins the minted CA: {hashes}")
        with tempfile.TemporaryDirectory() as dry:
            try:
                out = subprocess.run([os.path.join(bindir, "kubeadm"), "join", "--dry-run", "--config", join,
                                      "--ignore-preflight-errors=all", "--v=1"],
                                     capture_output=True, text=True, timeout=240,
                                     env=dict(os.environ, KUBEADM_JOIN_DRYRUN_DIR=dry))
                text, rc = out.stdout + out.stderr, out.returncode
            except subprocess.TimeoutExpired as e:
                text, rc = f"{e.stdout or ''}{e.stderr or ''}\n(timed out after 240 s)", "timeout"
        with open(os.path.join(work, "join-dry-run.txt"), "w") as f:
            f.write(text)
        # kubeadm's dry run falls back to a built-in cluster-info (token abcdef, endpoint
        # 192.168.0.101:6443) when the real discovery fails, and says so with this warning.
        # (The same address still shows in its fake kube-proxy ConfigMap: no kube-proxy here.)
        fake = "Mutating the JoinConfiguration" in text
        real = (f'validates against pinned roots, will use API Server "{ep}"' in text
                and f"server: https://{ep}" in text)
        check(real and not fake, f"kubeadm join --dry-run discovered the real cluster at {ep} "
              f"(output in {work}/join-dry-run.txt)",
              "\n    ".join(l for l in text.splitlines() if "discovery" in l or "Mutating" in l)[:3000])
        # The whole dry run must succeed, not only its discovery: a join the minted
        # configuration would fail later (kubelet-start, TLS bootstrap) exits non-zero.
        check(rc == 0, f"kubeadm join --dry-run exits 0 (exit {rc})",
              "\n    ".join(text.strip().splitlines()[-15:]))
        for line in text.splitlines():
            if "[discovery]" in line:
                print("    " + line.strip().split("] ", 1)[-1])

        # 5. Loopback only.
        listeners = cp.listeners()
        outside = [l for l in listeners if not l[2].startswith("127.0.0.1:")]
        check(listeners and not outside, f"{len(listeners)} listeners, all on 127.0.0.1", f"outside: {outside}")
        pids = cp.pids()
    gone = [n for n, p in pids.items() if os.path.exists(f"/proc/{p}")]
    check(not gone, f"every started process ended after stop ({len(pids)}: {sorted(pids)})", f"left: {gone}")
    print(f"controlplane-test: {time.monotonic() - t0:.1f}s; work in {work}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
