"""One-command demo: a Kubernetes cluster made only of nodeagent nodes.

On a fresh Debian 12 machine it installs what it needs (Debian packages), builds nodeagent and,
once (cached outside the clone), the real Kubernetes binaries and the Packer-built kube image
(air-gapped: the control plane's container images are baked in). Then it mints a cluster with
`nodeagent mint` (PKI, a bootstrap token, one CABPK-shaped bundle per node), boots the nodes
under QEMU (TCG) on a private network, with nodeagent and no cloud-init on each:

  cp-0   the first control plane (`kubeadm init`)
  w-0    a worker (`kubeadm join`)
  cp-1   with --three: a control-plane join with stacked etcd (not yet finished on 2 host
         cores: kubeadm's 2 s etcd calls timed out; BENCHMARKS.md)

and ends with `kubectl get nodes -o wide` and `kubectl get pods -A -o wide` from the real API
server: every Node Ready, the static pods Running, a test pod Running on w-0.

    tests/qemu/demo [--three]

The nodes boot what ships: the image bakes packaging/build-deb's release package (fat LTO; about
5 min more when cold). QEMU_RELEASE=0 bakes the dev build's package instead, as the test tiers do.
"""

import argparse
import os
import sys
import time

from harness import cluster, kube_tier as kt, qemu as q, scenarios as sc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--three", action="store_true", help="three nodes: cp-0, cp-1 (control-plane join), w-0; not yet finished on 2 host cores under TCG (BENCHMARKS.md)")
    args = ap.parse_args()
    # The release .deb, as the time-to-Node benchmark bakes it (packer_artifact keys the image by
    # the package's hash, so the tiers' dev image is not reused for it).
    os.environ.setdefault("QEMU_RELEASE", "1")
    t0 = time.monotonic()
    work = os.path.join(q.REPO, "target", "qemu-runs", "demo-" + time.strftime("%Y%m%d-%H%M%S"))
    s = sc.Session(work)
    print("demo: preparing host tools, kernel, nodeagent and the kube node image (a real `packer build`, "
          "cached by its inputs)...", flush=True)
    if not kt.cpl.built():
        print("demo: cold: this first run builds nodeagent (the release build the image ships), the real Kubernetes binaries (tests/k8s/build: about "
              "10 min on an idle 2-core machine, up to 19 when busy) and the kube node image (about 12 min): about "
              "45 min in all with the cluster. Later runs reuse them: about a minute, then the cluster's 11-16 min "
              "(a new commit bakes the image again: 12 min). Progress below.",
              flush=True)
    s.fast()
    image = kt.kube(s).prepare()
    print(f"demo: ready in {time.monotonic() - t0:.0f}s; the nodes boot overlays of the Packer-built image "
          f"{os.path.relpath(image, q.REPO)}", flush=True)
    nodes = ["cp-0", "cp-1", "w-0"] if args.three else ["cp-0", "w-0"]
    c = sc.Checks()
    start = time.monotonic()
    try:
        _, wide = cluster.run_cluster(s, c, "demo", nodes, retry="cp-1" if args.three else None, workdir=os.path.join(work, "demo"))
    except Exception as e:  # the checks say what failed; a harness error too
        c.failures.append(f"harness error: {e}")
        wide = ""
    s.cleanup()
    took = time.monotonic() - start
    if c.failures:
        print(f"demo: FAILED after {took:.0f}s (logs in {work}):", flush=True)
        for f in c.failures:
            print(f"  - {f}", flush=True)
        return 1
    print(f"\n$ kubectl get nodes -o wide\n{wide}\n", flush=True)
    print(f"demo: a cluster of {len(nodes)} nodeagent nodes ({', '.join(nodes)}), every Node Ready, "
          f"{took:.0f}s from the first power-on ({time.monotonic() - t0:.0f}s in all; logs in {work}). Real: kubeadm, "
          f"kubelet, etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd; no cloud-init.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
