"""Kube tier: a node image with nodeagent, the real kubeadm and kubelet (tests/k8s/build),
Debian's containerd and runc, and no cloud-init, boots from a `nodeagent mint bootstrap`
worker bundle and joins a real control plane (tests/k8s/controlplane.py) running on the
host's 127.0.0.1. The guest reaches it at 10.0.2.100:6443 through an explicit `guestfwd`
on a `-netdev user,restrict=on` NIC: each guest connection starts `socat` to
127.0.0.1:PORT, so no guest packet can reach another address.

Also the time-to-Node benchmark (`python3 tests/qemu/kube_tier.py bench [--rounds N]`):
power-on to the Node object in the API server, nodeagent against the same image with
Debian's cloud-init (NoCloud seed of the same bundle), interleaved.
"""

import base64
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "k8s"))
import controlplane as cpl  # noqa: E402
import qemulib as q  # noqa: E402
import scenarios as sc  # noqa: E402
import systemd_tier as st  # noqa: E402

GUEST_ENDPOINT = "10.0.2.100:6443"
UNINITIALIZED_TAINT = "node.cluster.x-k8s.io/uninitialized"
MEM_MB = 2048
DISK_MB = 2560

# What the kubeadm and kubelet packages install (kubernetes/release, packages/deb): the
# kubelet unit and kubeadm's drop-in, which reads the flags `kubeadm join` writes.
KUBELET_UNIT = """[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
"""

KUBEADM_DROPIN = """# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""

# As image-builder's containerd and kubernetes roles leave a CAPI node: the systemd cgroup
# driver (kubeadm's default for the kubelet), the pod sandbox image the node has (the local
# pause image of image-build/k8s-images, under the name `kubeadm config images list` gives:
# a wrong one makes an air-gapped node try to pull it), Debian's CNI plugins (in /usr/lib/cni,
# not /opt/cni/bin), the bridge netfilter and forwarding sysctls kubeadm's pre-flight checks.
CONTAINERD_CONFIG = """version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "/etc/cni/net.d"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""


def pause_image(bindir):
    """The pause image kubeadm names for its version (`kubeadm config images list`)."""
    kubeadm = os.path.join(bindir, "kubeadm")
    version = subprocess.run([kubeadm, "version", "-o", "short"], capture_output=True, text=True,
                             check=True).stdout.strip()
    out = subprocess.run([kubeadm, "config", "images", "list", "--kubernetes-version", version],
                         capture_output=True, text=True, check=True).stdout.split()
    return next(ref for ref in out if ref.rsplit("/", 1)[-1].startswith("pause:"))
MODULES_LOAD = "overlay\nbr_netfilter\n"
SYSCTL = "net.bridge.bridge-nf-call-iptables = 1\nnet.bridge.bridge-nf-call-ip6tables = 1\nnet.ipv4.ip_forward = 1\n"


def add_kubernetes(root, kernel, bindir):
    """The Kubernetes node parts of the image: the real kubeadm and kubelet from the
    project's build, their units, containerd's config, every kernel module (a real image has
    them all: kube-proxy, containerd and kubelet load what they need) and the kernel config
    kubeadm's SystemVerification reads."""
    for name in ("kubeadm", "kubelet"):
        shutil.copy2(os.path.join(bindir, name), os.path.join(root, "usr/bin", name))
    st._write(root, "/lib/systemd/system/kubelet.service", KUBELET_UNIT)
    st._write(root, "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf", KUBEADM_DROPIN)
    # Enabled, as the package's postinst leaves it: it restarts until `kubeadm join` writes its config.
    wants = os.path.join(root, "etc/systemd/system/multi-user.target.wants")
    os.makedirs(wants, exist_ok=True)
    if not os.path.lexists(os.path.join(wants, "kubelet.service")):
        os.symlink("/lib/systemd/system/kubelet.service", os.path.join(wants, "kubelet.service"))
    st._write(root, "/etc/containerd/config.toml", CONTAINERD_CONFIG.replace("{pause}", pause_image(bindir)))
    st._write(root, "/etc/modules-load.d/kubernetes.conf", MODULES_LOAD)
    st._write(root, "/etc/sysctl.d/99-kubernetes.conf", SYSCTL)
    moddir = os.path.join(root, "lib/modules", kernel.version)
    shutil.rmtree(moddir, ignore_errors=True)
    shutil.copytree(kernel.moddir, moddir, symlinks=True)
    q.run(["chroot", root, "depmod", "-a", kernel.version])  # the image's own kmod
    shutil.copy2(os.path.join(kernel.root, "boot", f"config-{kernel.version}"), os.path.join(root, "boot"))


class KubeSession:
    """Kube-tier images (staged once per variant) and the control plane, on a scenarios.Session."""

    def __init__(self, s):
        self.s = s
        self.trees = {}
        self.bindir = cpl.k8s_bin()
        # The scenarios and the demo boot the Packer-built Kubernetes node image
        # (image-build/build-qemu kube); the time-to-Node benchmark sets this to False to
        # compare two images staged from one root (nodeagent's and cloud-init's).
        self.use_artifact = True
        self.artifact = None

    def tree(self, variant, seed=None):
        kernel, _, nodeagent = self.s.fast()
        key = (variant, json.dumps(seed))
        if key not in self.trees:
            t = time.monotonic()
            base = "kube-cloudinit" if variant == "cloudinit" else "kube"
            root = st.stage(f"kube-{variant}", variant, kernel, nodeagent=nodeagent, seed=seed,
                            workdir=self.s.workdir, base=base)
            add_kubernetes(root, kernel, self.bindir)
            self.trees[key] = root
            self.s.scratch.append(root)
            q.log(f"kube image ({variant}) staged in {time.monotonic() - t:.1f}s")
        return self.trees[key]

    def prepare(self):
        """Make (or find cached) the image the VMs boot: the Packer-built `kube` image, or the
        staged tree when use_artifact is off. Returns its path."""
        if self.use_artifact:
            self.artifact = q.packer_artifact("kube")
            return self.artifact
        return self.tree("nodeagent")

    def disk(self, name, variant="nodeagent", files=None):
        """A fresh disk of the staged image, with `files` ({path: text}, e.g. a node's
        /etc/nodeagent/config.yaml or NoCloud seed) on this disk only."""
        if self.use_artifact:
            if variant != "nodeagent":
                raise RuntimeError(f"the kube scenarios boot the Packer-built Kubernetes node image, not variant {variant}")
            t = time.monotonic()
            path, self.artifact = st.sysd(self.s).overlay(name, "kube", files=files)
            q.log(f"overlay of the Packer-built image {os.path.relpath(self.artifact, q.REPO)} ready in "
                  f"{time.monotonic() - t:.1f}s")
            return path
        root = self.tree(variant, ("", "", "") if variant == "cloudinit" else None)
        saved = {}
        for path, text in (files or {}).items():
            full = os.path.join(root, path.lstrip("/"))
            saved[path] = open(full).read() if os.path.exists(full) else None
            st._write(root, path, text)
        try:
            disk = st.make_partitioned_disk(root, os.path.join(self.s.workdir, f"{name}.img"), DISK_MB)
        finally:
            for path, text in saved.items():
                if text is None:
                    os.unlink(os.path.join(root, path.lstrip("/")))
                else:
                    st._write(root, path, text)
        self.s.scratch.append(disk)
        return disk

    def vm(self, name, disk, fwcfg, api_port, mac):
        if self.use_artifact:
            q.require_artifact(disk, self.artifact)
        nic = f"user,restrict=on,guestfwd=tcp:{GUEST_ENDPOINT}-cmd:socat STDIO TCP:127.0.0.1:{api_port}"
        # The guest's journal on its console (console.log in the run's directory): what
        # kubeadm and the kubelet said, also when the node never gets as far as its report.
        vm = st.sysd(self.s).vm(name, disk, fwcfg, nets=[(nic, mac)], append="systemd.journald.forward_to_console=1")
        vm.mem = MEM_MB
        return vm

    def control_plane(self, name, pki):
        return cpl.ControlPlane(pki, os.path.join(self.s.workdir, name), cluster="demo", endpoint=GUEST_ENDPOINT,
                                bindir=self.bindir)


def kube(s):
    if not hasattr(s, "kube"):
        s.kube = KubeSession(s)
    return s.kube


def worker_bundle(s, workdir, node, mac, pki, token):
    _, _, nodeagent = s.fast()
    return sc.mint_bundle(nodeagent, workdir, "worker", "demo", node, GUEST_ENDPOINT, pki, token=token,
                          extra=["--mac", mac], version=cpl.K8S_VERSION)


def new_token(s):
    """`nodeagent mint token`."""
    _, _, nodeagent = s.fast()
    return subprocess.run([nodeagent, "mint", "token"], check=True, capture_output=True, text=True).stdout.strip()


def apply_token(s, cp, token):
    """`nodeagent mint token --secret` for `token`, applied to the real API server."""
    _, _, nodeagent = s.fast()
    secret = subprocess.run([nodeagent, "mint", "token", "--secret", "--ttl", "2h", "--token", token],
                            check=True, capture_output=True, text=True).stdout
    cp.add_token_secret(secret)


def mint_token(s, cp):
    """A minted token whose Secret the real API server has."""
    token = new_token(s)
    apply_token(s, cp, token)
    return token


def wait_node(cp, name, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = cp.node(name)
        if node:
            return node
        time.sleep(2)
    return None


def check_node(c, cp, vm, name):
    """The Node object read back from the real API server: name, kubelet version, CAPI's taint."""
    node = wait_node(cp, name, 120)
    c.ok(node is not None, f"no Node {name} in the API server")
    if not node:
        return None
    taints = [t.get("key") for t in node.get("spec", {}).get("taints", [])]
    info = node.get("status", {}).get("nodeInfo", {})
    c.eq(node["metadata"]["name"], vm.name, "Node name = VM name")
    c.eq(info.get("kubeletVersion"), cpl.K8S_VERSION, "Node's kubeletVersion")
    c.ok(UNINITIALIZED_TAINT in taints, f"Node taints {taints} lack {UNINITIALIZED_TAINT}")
    wide = cp.kubectl("get", "node", name, "-o", "wide", check=False).stdout.rstrip()
    q.log("    Node read back from the real API server:\n" + "\n".join("      " + l for l in wide.splitlines()))
    q.log(f"    name={node['metadata']['name']} kubeletVersion={info.get('kubeletVersion')} taints={taints} "
          f"created={node['metadata'].get('creationTimestamp')}")
    return node


def _boot_join(s, c, name, mac, cp, token):
    k = kube(s)
    fw = worker_bundle(s, s.workdir, name, mac, cp.minted_pki, token)
    vm = k.vm(name, k.disk(name), dict(fw, **{"test.hold": "1", "test.timeout": "900"}), cp.api_port, mac)
    vm.start()
    final = vm.wait_for(lambda o: o.get("phase") in ("done", "failed"), 900)
    c.ok(final is not None and final.get("phase") == "done",
         f"{name}: nodeagent's final status {final}; phases {vm.phases()}")
    return vm, final


def sc_kube_join(s):
    """kube tier: a worker bundle minted by `nodeagent mint`, a real control plane on the
    host's loopback, a node image without cloud-init: nodeagent runs the real `kubeadm join`,
    the kubelet TLS-bootstraps, the Node named after the VM appears in the real API server."""
    c = sc.Checks()
    _, _, nodeagent = s.fast()
    pki = sc.mint_pki(nodeagent, s.workdir, "demo")
    with kube(s).control_plane("cp-join", pki) as cp:
        token = mint_token(s, cp)
        vm, final = _boot_join(s, c, "kube-md-0", "52:54:00:00:10:01", cp, token)
        if final and final.get("phase") == "done":
            check_node(c, cp, vm, "kube-md-0")
        vm.kill()
        s.record(vm, "ok, killed after the Node check" if final else "TIMEOUT")
    return c.failures


def sc_kube_join_late_cp(s):
    """kube tier: the API server starts late: nodeagent's first kubeadm join times out
    (kubeadm.timeout_secs 90 in this node's image config), it resets and retries, and the
    retry turns into a Node."""
    c = sc.Checks()
    _, _, nodeagent = s.fast()
    pki = sc.mint_pki(nodeagent, s.workdir, "demo")
    cp = kube(s).control_plane("cp-late", pki)
    config = "kubeadm:\n  timeout_secs: 90\n  backoff_initial_secs: 1.0\n"
    k = kube(s)
    name, mac = "kube-md-late", "52:54:00:00:10:02"
    # The token is known before the API server exists: minted, applied once it is up.
    token = new_token(s)
    fw = worker_bundle(s, s.workdir, name, mac, pki, token)
    vm = k.vm(name, k.disk(name, files={"/etc/nodeagent/config.yaml": config}), dict(fw, **{"test.hold": "1", "test.timeout": "1200"}), cp.api_port, mac)
    final = None
    try:
        vm.start()
        first = vm.wait_for(lambda o: "kubeadm" in (o.get("step") or "") or o.get("phase") in ("done", "failed"), 600)
        c.ok(first is not None, "the agent never reached its kubeadm step")
        # Let the first attempt run into its deadline with no API server behind the endpoint.
        time.sleep(100)
        cp.start()
        apply_token(s, cp, token)
        final = vm.wait_for(lambda o: o.get("phase") in ("done", "failed"), 900)
        c.ok(final is not None and final.get("phase") == "done", f"final status {final}; phases {vm.phases()}")
        seen = [json.dumps(o) for _, o in vm.status]
        q.log("    statuses:\n" + "\n".join(f"      {t:6.1f}s {o.get('phase')} {o.get('detail') or o.get('error') or ''}"
                                         for t, o in vm.status))
        c.ok(any("attempt 2 of" in o for o in seen), "no second kubeadm join attempt was reported")
        if final and final.get("phase") == "done":
            check_node(c, cp, vm, name)
    finally:
        vm.kill()
        cp.stop()
    s.record(vm, "ok, killed after the Node check" if final else "TIMEOUT")
    return c.failures


def nocloud_seed(fw, name):
    """The same bootstrap data as a NoCloud seed for cloud-init: the bundle's userdata as it
    is, its metadata's instance-id and hostname as meta-data, its netplan as network-config."""
    import yaml  # the benchmark only (PyYAML); the tests need only the standard library

    def decoded(key):
        raw = fw[key]
        enc = fw.get(key + ".encoding", b"").decode().strip()
        if enc in ("base64", "b64"):
            raw = base64.b64decode(raw)
        elif enc in ("gzip+base64", "gz+b64"):
            import gzip

            raw = gzip.decompress(base64.b64decode(raw))
        return raw.decode()

    meta = yaml.safe_load(decoded("guestinfo.metadata"))
    seed = "/var/lib/cloud/seed/nocloud/"
    return {seed + "meta-data": f'instance-id: "{meta["instance-id"]}"\nlocal-hostname: "{name}"\n',
            seed + "user-data": decoded("guestinfo.userdata"),
            seed + "network-config": yaml.safe_dump(meta["network"])}


class NodeWatch:
    """`kubectl get nodes --watch`: the host's monotonic time each Node name was first seen."""

    def __init__(self, cp):
        import threading

        self.seen = {}
        self.proc = subprocess.Popen([cp.bin("kubectl"), "--kubeconfig", cp.kubeconfig(), "get", "nodes", "--watch",
                                      "-o", "name"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.seen.setdefault(line.strip().removeprefix("node/"), time.monotonic())

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def bench(workdir, rounds=5):
    """Power-on to Node registered: the nodeagent image against the same image with Debian's
    cloud-init (NoCloud seed of the same bundle, same kubeadm, kubelet and containerd),
    interleaved (the order alternates every round), one control plane for all boots, a fresh
    disk for every boot, nodeagent built with the release profile (what ships)."""
    os.environ["QEMU_RELEASE"] = "1"
    s = sc.Session(workdir)
    k = kube(s)
    k.use_artifact = False  # two images staged from one root: comparable
    _, _, nodeagent = s.fast()
    pki = sc.mint_pki(nodeagent, workdir, "demo")
    times = {"nodeagent": [], "cloudinit": []}
    loads = [os.getloadavg()[0]]
    with k.control_plane("cp-bench", pki) as cp:
        token = mint_token(s, cp)
        watch = NodeWatch(cp)
        try:
            for r in range(rounds):
                order = ["nodeagent", "cloudinit"] if r % 2 == 0 else ["cloudinit", "nodeagent"]
                for variant in order:
                    name, mac = f"ttn-{variant[:2]}-{r + 1}", f"52:54:00:00:30:{r * 2 + (variant == 'cloudinit') + 1:02x}"
                    fw = worker_bundle(s, workdir, name, mac, pki, token)
                    files = nocloud_seed(fw, name) if variant == "cloudinit" else None
                    test = {"test.hold": "1", "test.timeout": "900", "test.wait": variant}
                    vm = k.vm(name, k.disk(name, variant, files), dict({} if files else fw, **test), cp.api_port, mac)
                    vm.start()
                    deadline = time.monotonic() + 900
                    while name not in watch.seen and time.monotonic() < deadline and vm.proc.poll() is None:
                        time.sleep(0.5)
                    ttn = watch.seen[name] - vm.t0 if name in watch.seen else None
                    times[variant].append(ttn)
                    vm.kill()
                    s.record(vm, f"Node after {ttn:.1f}s" if ttn else "no Node")
                    loads.append(os.getloadavg()[0])
                    print(f"round {r + 1} {variant}: power-on to Node {ttn if ttn is None else round(ttn, 1)} s, "
                          f"load {loads[-1]:.1f}", flush=True)
        finally:
            watch.stop()
    s.cleanup()

    def stat(xs):
        ok = sorted(x for x in xs if x is not None)
        if not ok:
            return "—"
        return f"{st._median(ok):.1f} s ({ok[0]:.1f}–{ok[-1]:.1f}, n={len(ok)}{', ' + str(len(xs) - len(ok)) + ' failed' if len(ok) < len(xs) else ''})"

    print(f"## Time to Node: {rounds} interleaved boots per image, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"host load average (1 min) during the run: {min(loads):.1f}–{max(loads):.1f}\n")
    print("| image | power-on → Node registered, median (min–max) |")
    print("|---|---|")
    print(f"| nodeagent | {stat(times['nodeagent'])} |")
    print(f"| Debian cloud-init 22.4 | {stat(times['cloudinit'])} |")
    return times


SCENARIOS = [
    ("join-real-control-plane", sc_kube_join),
    ("join-retry-late-api-server", sc_kube_join_late_cp),
]


if __name__ == "__main__":
    if sys.argv[1:2] == ["bench"]:
        # bench [--rounds N]
        n = int(sys.argv[3]) if sys.argv[2:3] == ["--rounds"] else 5
        bench(os.path.join(q.REPO, "target", "qemu-runs", "time-to-node-" + time.strftime("%Y%m%d-%H%M%S")), n)
    else:
        sys.exit(sc.main(["--tier", "kube", *sys.argv[1:]]))
