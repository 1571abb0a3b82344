"""A real Kubernetes control plane as plain processes on 127.0.0.1, made from a PKI that
`nodeagent mint pki` minted: etcd, kube-apiserver and kube-controller-manager with the
flags kubeadm's static-pod manifests give them (cmd/kubeadm/app/phases/controlplane/
manifests.go, etcd/local.go), and the cluster objects a join needs, made by real kubeadm
(`init phase upload-config` and `bootstrap-token`). The QEMU scenarios, the demo and
tests/k8s/controlplane-test share it.

Every listener binds 127.0.0.1. `endpoint` is the API endpoint the nodes are told (the
cluster-info ConfigMap, the kubeconfigs' server, the serving certificate's SANs): by
default the host's own 127.0.0.1:PORT; a QEMU guest is given e.g. 10.0.2.100:6443, which
its `guestfwd` forwards to 127.0.0.1:PORT. Host-side clients always use 127.0.0.1:PORT.

Every process is started in its own session and ended by PID (SIGTERM, then SIGKILL after
a bound) on every exit path: `stop()`, the context manager, atexit, SIGTERM/SIGINT.
Python 3 standard library only.
"""

import atexit
import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from harness import TESTS, free_port

HERE = os.path.join(TESTS, "k8s")  # build
K8S_VERSION = "v1.34.4"
SERVICE_CIDR = "10.96.0.0/12"
# The API server's own advertised address (kubeadm's localAPIEndpoint.advertiseAddress):
# never bound, only named (serving certificate SANs; the `kubernetes` Service, whose endpoint
# reconciler is off). kubeadm replaces a loopback one by the host's default-route address,
# so it is the QEMU guests' view of the host, also when the nodes are told 127.0.0.1.
ADVERTISE = "10.0.2.100"


def log(msg):
    print(f"controlplane: {msg}", file=sys.stderr, flush=True)


def built():
    """Whether the real binaries are already built (the first build takes a while)."""
    return bool(os.environ.get("NODEAGENT_K8S_BIN")) or subprocess.run(
        [os.path.join(HERE, "build"), "--print"], stdout=subprocess.DEVNULL).returncode == 0


def k8s_bin():
    """The directory of the real binaries (tests/k8s/build builds them once, then reuses)."""
    if os.environ.get("NODEAGENT_K8S_BIN"):
        return os.environ["NODEAGENT_K8S_BIN"]
    out = subprocess.run([os.path.join(HERE, "build")], check=True, stdout=subprocess.PIPE, text=True)
    return out.stdout.strip().splitlines()[-1]


_LIVE = []  # every ControlPlane not yet stopped, for the atexit and signal paths


def _stop_all(*_):
    for cp in list(_LIVE):
        cp.stop()


def _on_signal(signum, _frame):
    _stop_all()
    sys.exit(128 + signum)


atexit.register(_stop_all)


class ControlPlane:
    def __init__(self, pki, workdir, cluster="demo", endpoint=None, bindir=None, version=K8S_VERSION):
        self.bindir = bindir or k8s_bin()
        self.minted_pki = pki
        self.work = os.path.abspath(workdir)
        self.cluster = cluster
        self.version = version
        self.api_port, self.etcd_port, self.peer_port = free_port(), free_port(), free_port()
        self.kcm_port, self.etcd_metrics = free_port(), free_port()
        self.endpoint = endpoint or f"127.0.0.1:{self.api_port}"
        self.host_server = f"https://127.0.0.1:{self.api_port}"
        self.pki = os.path.join(self.work, "pki")
        self.procs = {}  # name -> Popen
        self.logs = {}

    # ------------------------------------------------------------------ plumbing

    def bin(self, name):
        return os.path.join(self.bindir, name)

    def kubeconfig(self, name="super-admin"):
        """A kubeconfig for host-side use (server 127.0.0.1:PORT): super-admin is
        system:masters from the start; admin.conf's group needs its binding first."""
        return os.path.join(self.work, "host", f"{name}.conf")

    def kubectl(self, *args, kubeconfig=None, check=True, timeout=60, input=None):
        cmd = [self.bin("kubectl"), "--kubeconfig", kubeconfig or self.kubeconfig(), *args]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input)
        if check and out.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({out.returncode}): {out.stderr.strip()}")
        return out

    def kubeadm(self, *args, timeout=120):
        cmd = [self.bin("kubeadm"), *args]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"kubeadm {' '.join(args)} failed ({out.returncode}):\n{out.stdout}{out.stderr}")
        return out.stdout

    def _spawn(self, name, args):
        path = os.path.join(self.work, "logs", f"{name}.log")
        self.logs[name] = path
        with open(path, "ab") as f:
            self.procs[name] = subprocess.Popen([self.bin(name), *args], stdin=subprocess.DEVNULL, stdout=f,
                                                stderr=subprocess.STDOUT, start_new_session=True)
        with open(os.path.join(self.work, "pids"), "a") as f:
            f.write(f"{name} {self.procs[name].pid}\n")

    def _wait(self, what, pred, timeout, proc=None):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc and self.procs[proc].poll() is not None:
                raise RuntimeError(f"{proc} exited ({self.procs[proc].returncode}) while waiting for {what}; "
                                   f"log tail:\n{self.tail(proc)}")
            if pred():
                return
            time.sleep(0.5)
        raise RuntimeError(f"timed out after {timeout}s waiting for {what}" +
                           (f"; {proc} log tail:\n{self.tail(proc)}" if proc else ""))

    def tail(self, name, lines=15):
        try:
            with open(self.logs[name], errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    # ------------------------------------------------------------------ life cycle

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def start(self, timeout=180):
        t0 = time.monotonic()
        if threading_main():
            for sig in (signal.SIGTERM, signal.SIGINT):
                if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
                    signal.signal(sig, _on_signal)
        shutil.rmtree(self.work, ignore_errors=True)
        for d in ("logs", "host", "kubeconfig"):
            os.makedirs(os.path.join(self.work, d))
        shutil.copytree(self.minted_pki, self.pki)
        _LIVE.append(self)
        try:
            self._certs_and_kubeconfigs()
            self._start_etcd()
            self._start_apiserver()
            self._start_controller_manager()
            self._cluster_objects()
        except BaseException:
            self.stop()
            raise
        log(f"up in {time.monotonic() - t0:.1f}s: API server {self.host_server} (nodes are told {self.endpoint}), "
            f"etcd 127.0.0.1:{self.etcd_port}, pids {self.pids()}")
        return self

    def pids(self):
        return {n: p.pid for n, p in self.procs.items()}

    def stop(self, grace=10):
        """End every started process by PID: SIGTERM to its session, SIGKILL after `grace`."""
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
        if self in _LIVE:
            _LIVE.remove(self)

    # ------------------------------------------------------------------ steps

    def config_path(self, uploaded=False):
        return os.path.join(self.work, "kubeadm-cluster.yaml" if uploaded else "kubeadm.yaml")

    def _certs_and_kubeconfigs(self):
        sans = sorted({"127.0.0.1", "localhost", self.endpoint.rsplit(":", 1)[0]})
        for uploaded in (False, True):
            with open(self.config_path(uploaded), "w") as f:
                f.write(self._config(sans, self.pki if not uploaded else "/etc/kubernetes/pki"))
        # Leaves signed by the minted CAs (kubeadm keeps every existing file); kubeconfigs
        # whose server is the nodes' endpoint, copied for the host with 127.0.0.1:PORT.
        self.kubeadm("init", "phase", "certs", "all", "--config", self.config_path())
        self.kubeadm("init", "phase", "kubeconfig", "all", "--config", self.config_path(),
                     "--kubeconfig-dir", os.path.join(self.work, "kubeconfig"))
        for name in os.listdir(os.path.join(self.work, "kubeconfig")):
            with open(os.path.join(self.work, "kubeconfig", name)) as f:
                text = f.read()
            with open(os.path.join(self.work, "host", name), "w") as f:
                # The server is the endpoint (admin, kubelet) or the advertised address
                # (controller-manager, scheduler); on the host both are 127.0.0.1:PORT.
                f.write(re.sub(r"(?m)^(\s*server: ).*$", lambda m: m.group(1) + self.host_server, text))

    def _config(self, sans, certificates_dir):
        """kubeadm's configuration of this cluster. The host's phases read the PKI from the
        work directory; the copy uploaded to kubeadm-config names the nodes' own
        /etc/kubernetes/pki, as on a real cluster (joins write the CA there, and the kubelet
        configuration kubeadm derives names it)."""
        return f"""apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: "{ADVERTISE}"
  bindPort: {self.api_port}
nodeRegistration:
  name: {self.cluster}-control-plane
bootstrapTokens:
- token: unused.0000000000000000
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: {self.cluster}
kubernetesVersion: {self.version}
controlPlaneEndpoint: "{self.endpoint}"
certificatesDir: {certificates_dir}
apiServer:
  certSANs: {json.dumps(sans)}
networking:
  serviceSubnet: {SERVICE_CIDR}
  dnsDomain: cluster.local
"""

    def _start_etcd(self):
        e = os.path.join(self.pki, "etcd")
        self._spawn("etcd", [
            f"--name={self.cluster}-control-plane", f"--data-dir={os.path.join(self.work, 'etcd')}",
            f"--listen-client-urls=https://127.0.0.1:{self.etcd_port}",
            f"--advertise-client-urls=https://127.0.0.1:{self.etcd_port}",
            f"--listen-peer-urls=https://127.0.0.1:{self.peer_port}",
            f"--initial-advertise-peer-urls=https://127.0.0.1:{self.peer_port}",
            f"--initial-cluster={self.cluster}-control-plane=https://127.0.0.1:{self.peer_port}",
            f"--listen-metrics-urls=http://127.0.0.1:{self.etcd_metrics}",
            f"--cert-file={e}/server.crt", f"--key-file={e}/server.key", "--client-cert-auth=true",
            f"--trusted-ca-file={e}/ca.crt", f"--peer-cert-file={e}/peer.crt", f"--peer-key-file={e}/peer.key",
            "--peer-client-cert-auth=true", f"--peer-trusted-ca-file={e}/ca.crt", "--snapshot-count=10000",
        ])
        self._wait("etcd to listen", lambda: port_open(self.etcd_port), 60, proc="etcd")

    def _start_apiserver(self):
        p = self.pki
        self._spawn("kube-apiserver", [
            f"--advertise-address={ADVERTISE}", "--bind-address=127.0.0.1",
            f"--secure-port={self.api_port}", "--allow-privileged=true", "--authorization-mode=Node,RBAC",
            f"--client-ca-file={p}/ca.crt", "--enable-admission-plugins=NodeRestriction",
            "--enable-bootstrap-token-auth=true", f"--etcd-cafile={p}/etcd/ca.crt",
            f"--etcd-certfile={p}/apiserver-etcd-client.crt", f"--etcd-keyfile={p}/apiserver-etcd-client.key",
            f"--etcd-servers=https://127.0.0.1:{self.etcd_port}",
            f"--kubelet-client-certificate={p}/apiserver-kubelet-client.crt",
            f"--kubelet-client-key={p}/apiserver-kubelet-client.key",
            "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
            f"--proxy-client-cert-file={p}/front-proxy-client.crt", f"--proxy-client-key-file={p}/front-proxy-client.key",
            "--requestheader-allowed-names=front-proxy-client", f"--requestheader-client-ca-file={p}/front-proxy-ca.crt",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-", "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-username-headers=X-Remote-User",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p}/sa.pub", f"--service-account-signing-key-file={p}/sa.key",
            f"--service-cluster-ip-range={SERVICE_CIDR}", f"--tls-cert-file={p}/apiserver.crt",
            f"--tls-private-key-file={p}/apiserver.key",
            # The Service endpoint of `kubernetes` would name the nodes' view of the
            # endpoint with the host's port; nothing here routes to it.
            "--endpoint-reconciler-type=none",
        ])

        def ready():
            out = self.kubectl("get", "--raw", "/readyz", check=False, timeout=20)
            return out.returncode == 0 and out.stdout.strip() == "ok"

        self._wait("the API server to be ready (/readyz)", ready, 150, proc="kube-apiserver")

    def _start_controller_manager(self):
        p = self.pki
        kc = self.kubeconfig("controller-manager")
        self._spawn("kube-controller-manager", [
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}", f"--kubeconfig={kc}",
            "--bind-address=127.0.0.1", f"--secure-port={self.kcm_port}", f"--client-ca-file={p}/ca.crt",
            f"--cluster-name={self.cluster}", f"--cluster-signing-cert-file={p}/ca.crt",
            f"--cluster-signing-key-file={p}/ca.key", "--controllers=*,bootstrapsigner,tokencleaner",
            "--leader-elect=false", f"--requestheader-client-ca-file={p}/front-proxy-ca.crt",
            f"--root-ca-file={p}/ca.crt", f"--service-account-private-key-file={p}/sa.key",
            "--use-service-account-credentials=true",
        ])
        self._wait("the controller manager to listen", lambda: port_open(self.kcm_port), 90,
                   proc="kube-controller-manager")

    def _cluster_objects(self):
        """kubeadm-config, kubelet-config, the bootstrap RBAC and cluster-info, made by real
        kubeadm; then cluster-info is pointed at the nodes' endpoint (kubeadm copies the
        server of the kubeconfig it connects with, here the host's 127.0.0.1:PORT)."""
        su = self.kubeconfig()
        self.kubeadm("init", "phase", "upload-config", "all", "--config", self.config_path(True), "--kubeconfig", su)
        self.kubeadm("init", "phase", "bootstrap-token", "--config", self.config_path(True), "--kubeconfig", su,
                     "--skip-token-print")
        # kubeadm's phase insists on a token of its own; the nodes use `nodeagent mint token`'s.
        self.kubectl("-n", "kube-system", "delete", "secret", "bootstrap-token-unused")
        with open(os.path.join(self.work, "kubeconfig", "admin.conf")) as f:
            admin = f.read()
        ca = self._field(admin, "certificate-authority-data")
        cluster_info = (f"apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n"
                        f"    server: https://{self.endpoint}\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\n"
                        f"kind: Config\npreferences: {{}}\nusers: null\n")
        patch = json.dumps({"data": {"kubeconfig": cluster_info}})
        self.kubectl("-n", "kube-public", "patch", "configmap", "cluster-info", "--type=merge", "-p", patch)

    @staticmethod
    def _field(text, key):
        for line in text.splitlines():
            if line.strip().startswith(key + ":"):
                return line.split(":", 1)[1].strip()
        raise RuntimeError(f"no {key} in the kubeconfig kubeadm wrote")

    # ------------------------------------------------------------------ what nodes need

    def add_token_secret(self, manifest, timeout=90):
        """Apply a bootstrap-token Secret (as `nodeagent mint token --secret` prints it) and
        wait until the bootstrapsigner controller has signed cluster-info for it."""
        self.kubectl("apply", "-f", "-", input=manifest)
        token_id = next(line.split(":", 1)[1].strip().strip('"') for line in manifest.splitlines()
                        if line.strip().startswith("token-id:"))
        if len(token_id) != 6:  # data: is base64
            token_id = base64.b64decode(token_id).decode()

        def signed():
            out = self.kubectl("-n", "kube-public", "get", "configmap", "cluster-info", "-o", "json", check=False)
            return out.returncode == 0 and f"jws-kubeconfig-{token_id}" in json.loads(out.stdout).get("data", {})

        self._wait(f"cluster-info to be signed for token {token_id}", signed, timeout, proc="kube-controller-manager")
        return token_id

    def node(self, name):
        out = self.kubectl("get", "node", name, "-o", "json", check=False)
        return json.loads(out.stdout) if out.returncode == 0 else None

    def listeners(self):
        """(pid, name, address) of every TCP listener the started processes hold."""
        inodes = {}
        for name, p in self.procs.items():
            try:
                for fd in os.listdir(f"/proc/{p.pid}/fd"):
                    link = os.readlink(f"/proc/{p.pid}/fd/{fd}")
                    if link.startswith("socket:["):
                        inodes[link[8:-1]] = (p.pid, name)
            except OSError:
                continue
        found = []
        for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
            try:
                rows = open(table).read().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                cols = row.split()
                if cols[3] == "0A" and cols[9] in inodes:  # LISTEN
                    found.append((*inodes[cols[9]], _addr(cols[1], v6)))
        return found


def _addr(hexaddr, v6):
    ip, port = hexaddr.split(":")
    raw = bytes.fromhex(ip)
    if v6:
        words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
        return f"[{socket.inet_ntop(socket.AF_INET6, words)}]:{int(port, 16)}"
    return f"{socket.inet_ntoa(raw[::-1])}:{int(port, 16)}"


def port_open(port):
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def threading_main():
    return threading.current_thread() is threading.main_thread()
