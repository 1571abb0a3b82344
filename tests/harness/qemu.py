"""QEMU test harness for nodeagent: guest images from Debian packages, boots under TCG,
bootstrap data in over fw_cfg, status back over virtio-serial.

Everything here is plumbing; the scenarios (scenarios.py) say what must happen.
Python 3 standard library only. Debian packages only (apt-get download + dpkg-deb -x),
cached under target/qemu-cache/. Guest networking: only `-netdev user,restrict=on` or
socket/dgram netdevs on 127.0.0.1.
"""

import glob
import hashlib
import io
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tarfile
import threading
import time

from harness import REPO, TESTS

HERE = os.path.join(TESTS, "qemu")  # guest/, data/, build-rootfs
CACHE = os.path.join(REPO, "target", "qemu-cache")
GUEST = os.path.join(HERE, "guest")

# Kernel modules the guests load themselves (ext4 is built into Debian's cloud kernel).
MODULES = ["virtio_pci", "virtio_blk", "virtio_net", "virtio_console", "virtio_rng", "qemu_fw_cfg"]
STATUS_PORT = "org.nodeagent.status"
REPORT_PORT = "org.nodeagent.test"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


# ---------------------------------------------------------------- host tools and packages


def ensure_host_tools():
    """The host tools the tiers use, from Debian packages; idempotent."""
    need = []
    for tool, pkg in [("qemu-system-x86_64", "qemu-system-x86"), ("mkfs.ext4", "e2fsprogs"), ("objcopy", "binutils"),
                      ("dpkg-shlibdeps", "dpkg-dev"), ("debootstrap", "debootstrap"), ("sfdisk", "fdisk"),
                      ("qemu-img", "qemu-utils"), ("socat", "socat")]:
        if not shutil.which(tool) and pkg not in need:
            need.append(pkg)
    if need:
        log(f"installing {' '.join(need)} (Debian packages)")
        lock = ["-o", "DPkg::Lock::Timeout=600"]  # other jobs may hold the dpkg lock for a while
        subprocess.run(["apt-get", *lock, "update", "-qq"], check=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        run(["apt-get", *lock, "install", "-y", "-qq", "--no-install-recommends", *need], env=env, stdout=subprocess.DEVNULL)


def _download(pkg):
    """apt-get download PKG into the cache (once) and return the .deb path."""
    debs = os.path.join(CACHE, "debs")
    os.makedirs(debs, exist_ok=True)
    found = [p for p in glob.glob(os.path.join(debs, "*.deb")) if os.path.basename(p).split("_")[0] == pkg]
    if found:
        return sorted(found)[-1]
    try:
        run(["apt-get", "download", "-q", pkg], cwd=debs, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except subprocess.CalledProcessError:
        run(["apt-get", "update", "-qq"])
        run(["apt-get", "download", "-q", pkg], cwd=debs, stdout=subprocess.DEVNULL)
    return _download(pkg)


def _extract(deb, name):
    out = os.path.join(CACHE, "x", name)
    if not os.path.exists(os.path.join(out, ".complete")):
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        run(["dpkg-deb", "-x", deb, out])
        open(os.path.join(out, ".complete"), "w").close()
    return out


def kernel_package():
    """Name of the versioned kernel package linux-image-cloud-amd64 depends on."""
    stamp = os.path.join(CACHE, "kernel-package")
    if os.path.exists(stamp):
        return open(stamp).read().strip()
    out = subprocess.run(["apt-cache", "depends", "linux-image-cloud-amd64"], capture_output=True, text=True)
    if "Depends:" not in out.stdout:
        run(["apt-get", "update", "-qq"])
        out = subprocess.run(["apt-cache", "depends", "linux-image-cloud-amd64"], capture_output=True, text=True, check=True)
    name = next(l.split(":", 1)[1].strip() for l in out.stdout.splitlines() if l.strip().startswith("Depends:"))
    os.makedirs(CACHE, exist_ok=True)
    with open(stamp, "w") as f:
        f.write(name + "\n")
    return name


class Kernel:
    """Debian's cloud kernel, its modules and busybox-static, from Debian packages."""

    def __init__(self):
        pkg = kernel_package()
        self.root = _extract(_download(pkg), pkg)
        self.version = pkg.removeprefix("linux-image-")
        self.vmlinuz = os.path.join(self.root, "boot", f"vmlinuz-{self.version}")
        self.moddir = os.path.join(self.root, "lib", "modules", self.version)
        self.busybox = os.path.join(_extract(_download("busybox-static"), "busybox-static"), "bin", "busybox")

    def module_closure(self, names):
        """The .ko files for `names` and everything they depend on, dependencies first
        (resolved from each module's own `depends=` modinfo, as depmod does)."""
        index = {}
        for path in glob.glob(os.path.join(self.moddir, "kernel", "**", "*.ko"), recursive=True):
            index[os.path.basename(path)[:-3].replace("-", "_")] = path
        order, seen = [], set()

        def visit(name):
            name = name.replace("-", "_")
            if name in seen:
                return
            seen.add(name)
            if name not in index:
                raise SystemExit(f"kernel module {name} not found in {self.moddir}")
            data = open(index[name], "rb").read()
            i = data.find(b"\0depends=")
            deps = data[i + 9 : data.index(b"\0", i + 9)].decode() if i >= 0 else ""
            for d in filter(None, deps.split(",")):
                visit(d)
            order.append((name, index[name], [d.replace("-", "_") for d in filter(None, deps.split(","))]))

        for n in names:
            visit(n)
        return order

    def modules_dep(self, names, rel):
        """modules.dep text for `names` and their dependencies: each line lists the module's
        whole dependency closure, innermost last (modprobe loads from the end)."""
        lines = []
        for name, path, deps in self.module_closure(names):
            closure = self.module_closure(deps) if deps else []
            lines.append(f"{rel(name, path)}: " + " ".join(rel(n, p) for n, p, _ in reversed(closure)))
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- cpio (newc) writer


class Cpio:
    """Minimal newc archive writer: what the kernel unpacks as an initramfs."""

    def __init__(self):
        self.buf = io.BytesIO()
        self.ino = 1

    def _entry(self, name, mode, data=b"", nlink=1):
        name_b = name.encode() + b"\0"
        hdr = "070701" + "".join(
            f"{v:08x}" for v in (self.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name_b), 0)
        )
        self.ino += 1
        self.buf.write(hdr.encode() + name_b)
        self.buf.write(b"\0" * ((4 - (110 + len(name_b)) % 4) % 4))
        self.buf.write(data)
        self.buf.write(b"\0" * ((4 - len(data) % 4) % 4))

    def dir(self, name, mode=0o755):
        self._entry(name, stat.S_IFDIR | mode, nlink=2)

    def file(self, name, data, mode=0o644):
        self._entry(name, stat.S_IFREG | mode, data)

    def symlink(self, name, target):
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def finish(self):
        self._entry("TRAILER!!!", 0)
        return self.buf.getvalue()


def build_initramfs(kernel):
    """A tiny initramfs shared by both tiers: busybox, the virtio and fw_cfg modules, and
    an /init that mounts root=/dev/vda and switch_roots into it (ext4 is built in)."""
    mods = kernel.module_closure(MODULES)
    init = open(os.path.join(GUEST, "initramfs-init"), "rb").read()
    bb = open(kernel.busybox, "rb").read()
    key = hashlib.sha256(b"v3" + init + bb + json.dumps([m[0] for m in mods]).encode() + kernel.version.encode()).hexdigest()[:16]
    out = os.path.join(CACHE, f"initramfs-{key}.cpio")
    if os.path.exists(out):
        return out
    c = Cpio()
    for d in ["bin", "dev", "proc", "sys", "newroot", "lib", "lib/modules", f"lib/modules/{kernel.version}", f"lib/modules/{kernel.version}/kernel"]:
        c.dir(d)
    c.file("bin/busybox", bb, 0o755)
    for applet in ["sh", "mount", "umount", "switch_root", "insmod", "modprobe", "sleep", "cat", "echo", "mkdir", "ls", "poweroff", "grep", "cp"]:
        c.symlink(f"bin/{applet}", "busybox")
    for name, path, deps in mods:
        c.file(f"lib/modules/{kernel.version}/kernel/{name}.ko", open(path, "rb").read())
    dep = kernel.modules_dep(MODULES, lambda name, path: f"kernel/{name}.ko")
    c.file(f"lib/modules/{kernel.version}/modules.dep", dep.encode())
    c.file("init", init, 0o755)
    tmp = f"{out}.tmp{os.getpid()}"  # side-by-side scenario processes may build it at once
    with open(tmp, "wb") as f:
        f.write(c.finish())
    os.rename(tmp, out)
    return out


# ---------------------------------------------------------------- nodeagent and the kubeadm stand-in


def cargo_build(bin_name="nodeagent", package="nodeagent"):
    """Build a workspace binary and return its path: the debug profile (the warm one), or the
    release profile (what ships) with QEMU_RELEASE=1, as the boot benchmark sets it."""
    release = os.environ.get("QEMU_RELEASE") == "1"
    run(["cargo", "build", "--quiet", *(["--release"] if release else []), "-p", package, "--bin", bin_name], cwd=REPO)
    return os.path.join(REPO, "target", "release" if release else "debug", bin_name)


def standin_kubeadm():
    """The recording kubeadm stand-in baked into guests as /usr/local/bin/kubeadm: the
    workspace's tests/kubeadm-standin (the same one the host tests use; there is no real
    kubeadm here). It records each call as a JSON line in /var/log/kubeadm-standin.jsonl."""
    return cargo_build("kubeadm-standin", "kubeadm-standin")


def shared_libs(binary):
    """Absolute paths of the shared libraries `binary` loads (host is Debian 12, like the guest)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True)
    libs = []
    for line in out.stdout.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
            libs.append(parts[2])
        elif parts and parts[0].startswith("/"):
            libs.append(parts[0])
    return libs


def install_stripped(binary, dest):
    """Copy a binary without its debug info (debug builds are >100 MB; the code is the same)."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    run(["objcopy", "--strip-debug", binary, dest])
    os.chmod(dest, 0o755)
    return dest


def copy_with_parents(src, root, dest=None):
    dest = os.path.join(root, (dest or src).lstrip("/"))
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.copy2(os.path.realpath(src), dest)
    return dest


# ---------------------------------------------------------------- the Packer-built image


BUILD_QEMU = os.path.join(REPO, "image-build", "build-qemu")


# flavour -> qcow2: build-qemu (and its read-back) once per process; the children of
# `scenarios.py --jobs` get their parent's in QEMU_ARTIFACTS (JSON).
_ARTIFACTS = json.loads(os.environ.get("QEMU_ARTIFACTS", "{}"))


def packer_artifact(flavour="plain"):
    """The node image `packer build -only=qemu.node` made (image-build/build-qemu: cached by
    its inputs, read back by image-build/check-image), with the nodeagent under test: the
    dev-profile binary's package, or the release build's with QEMU_RELEASE=1. Returns the
    qcow2 named in its packer-manifest.json."""
    if flavour in _ARTIFACTS:
        return _ARTIFACTS[flavour]
    env = dict(os.environ, IMAGE_BUILD_DEB="release" if os.environ.get("QEMU_RELEASE") == "1" else "dev")
    out = subprocess.run([BUILD_QEMU, flavour], env=env, stdout=subprocess.PIPE, text=True, timeout=2700)
    if out.returncode != 0:
        raise RuntimeError(f"image-build/build-qemu {flavour} failed (exit {out.returncode})")
    outdir = out.stdout.strip().splitlines()[-1]
    manifest = json.load(open(os.path.join(outdir, "packer-manifest.json")))
    build = manifest["builds"][-1]
    if build.get("builder_type") != "qemu":
        raise RuntimeError(f"{outdir}/packer-manifest.json: not a qemu build: {build}")
    _ARTIFACTS[flavour] = os.path.join(outdir, "qemu", build["files"][0]["name"])
    return _ARTIFACTS[flavour]


def artifacts_env():
    """The artifacts found so far, as QEMU_ARTIFACTS for child processes."""
    return json.dumps(_ARTIFACTS)


def artifact_overlay(artifact, path, grow_mb=0):
    """A copy-on-write overlay of the Packer-built image (the image itself is never written);
    `grow_mb` grows the overlay's disk, as CAPV's diskGiB grows a template's."""
    if os.path.exists(path):
        os.unlink(path)
    run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", artifact, "-F", "qcow2", path])
    if grow_mb:
        run(["qemu-img", "resize", "-q", "-f", "qcow2", path, f"+{grow_mb}M"])
    return path


def require_artifact(disk, artifact):
    """Refuse to boot anything but an overlay whose backing file is the Packer-built image."""
    info = json.loads(subprocess.run(["qemu-img", "info", "--output=json", disk], capture_output=True, text=True,
                                     check=True).stdout)
    backing = info.get("full-backing-filename") or info.get("backing-filename")
    if info.get("format") != "qcow2" or not backing or os.path.realpath(backing) != os.path.realpath(artifact):
        raise RuntimeError(f"{disk} is not an overlay of the Packer-built image {artifact} "
                           f"(format {info.get('format')}, backing file {backing})")


# ---------------------------------------------------------------- fast tier plumbing

# The fast tier boots the Packer-built image with this init instead of systemd (from the plumbing disk).
FAST_INIT = "/usr/local/lib/qemu-test/fast-init"


def fast_plumbing_disk(kernel, kubeadm, path):
    """The fast tier's plumbing disk, laid over an overlay of the Packer-built image at boot
    (qemu_test.plumbing): guest/fast-init (booted as init=FAST_INIT: nodeagent without
    systemd, a tar report, power-off), busybox for the few tools the image has not (nc,
    httpd, an immediate poweroff), and the recording kubeadm stand-in as /usr/local/bin/kubeadm."""
    tree = path + ".d"
    shutil.rmtree(tree, ignore_errors=True)
    for src, dest, mode in [(os.path.join(GUEST, "fast-init"), FAST_INIT, 0o755),
                            (kernel.busybox, "/usr/local/lib/qemu-test/busybox", 0o755)]:
        copy_with_parents(src, tree, dest.lstrip("/"))
        os.chmod(os.path.join(tree, dest.lstrip("/")), mode)
    install_stripped(kubeadm, os.path.join(tree, "usr/local/bin/kubeadm"))
    # The stand-in acts on / only where this marker says it is the guest's kubeadm.
    os.makedirs(os.path.join(tree, "etc"), exist_ok=True)
    open(os.path.join(tree, "etc", "kubeadm-standin.guest"), "w").close()
    make_disk(tree, path, size_mb=64)
    shutil.rmtree(tree)
    return path


def make_disk(stage, path, size_mb=256):
    """ext4 image populated from `stage` with mkfs.ext4 -d (no loop mounts)."""
    if os.path.exists(path):
        os.unlink(path)
    run(["mkfs.ext4", "-q", "-F", "-L", "root", "-E", "root_owner=0:0", "-d", stage, path, f"{size_mb}M"],
        stdout=subprocess.DEVNULL)
    return path


# ---------------------------------------------------------------- one VM


class VM:
    """One QEMU guest: start, collect status lines (timestamped from QEMU start), collect
    the guest report (a tar stream on a second virtio port), wait with a timeout, kill."""

    def __init__(self, name, workdir, kernel, initrd, disk, fwcfg=None, append="", mem=384, nets=(), extra=()):
        self.name = name
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.kernel, self.initrd, self.disk = kernel, initrd, disk
        self.fwcfg = dict(fwcfg or {})
        self.append = append
        self.mem = mem
        self.nets = list(nets)
        self.extra = list(extra)
        self.status = []  # (seconds since start, status dict)
        self.sets = []  # (seconds since start, {"key", "value"}) for other guestinfo keys
        self.report = bytearray()
        self.proc = None
        self.t0 = None
        self.ended = None
        self.listeners = []
        self.smp = 1
        # -cpu for TCG; None: QEMU's default (qemu64). "max" emulates AES-NI, PCLMULQDQ and
        # SHA: Go's TLS and etcd's gRPC then leave the byte-wise software paths.
        self.cpu = None
        # MiB of translated code TCG keeps before it throws all of it away and translates
        # again; None: QEMU's default (1 GiB on this host).
        self.tb_size = None
        # A command prefix QEMU runs under: `ip netns exec NS` puts a guest's tap NICs inside
        # a network namespace the test made (tests/harness/cluster.py).
        self.prefix = []

    def _fwcfg_args(self):
        args = []
        for key, value in self.fwcfg.items():
            path = os.path.join(self.dir, "fwcfg." + key.replace("/", "_"))
            with open(path, "wb") as f:
                f.write(value if isinstance(value, bytes) else value.encode())
            args += ["-fw_cfg", f"name=opt/{key},file={path}"]
        return args

    def command(self):
        st = os.path.join(self.dir, "status.sock")
        rep = os.path.join(self.dir, "report.sock")
        for s in (st, rep):
            if os.path.exists(s):
                os.unlink(s)
        cmd = [
            "qemu-system-x86_64", "-accel", "tcg" + (f",tb-size={self.tb_size}" if self.tb_size else ""), "-m", str(self.mem), "-smp", str(self.smp),
            "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            "-kernel", self.kernel, "-initrd", self.initrd,
            # no_timer_check: on a loaded host TCG is too slow for the kernel's IO-APIC timer
            # check, which then panics ("IO-APIC + timer doesn't work") before init.
            "-append", f"console=ttyS0 root=/dev/vda rw quiet panic=-1 no_timer_check {self.append}".strip(),
            "-chardev", f"file,id=con,path={os.path.join(self.dir, 'console.log')}", "-serial", "chardev:con",
            # A .qcow2 is a copy-on-write overlay of the Packer-built image (systemd tier).
            "-drive", f"file={self.disk},if=virtio,format={'qcow2' if self.disk.endswith('.qcow2') else 'raw'},cache=unsafe",
            "-device", "virtio-rng-pci",
            "-device", "virtio-serial-pci",
            "-chardev", f"socket,id=st,path={st},server=on,wait=off",
            "-device", f"virtserialport,chardev=st,name={STATUS_PORT}",
            "-chardev", f"socket,id=rep,path={rep},server=on,wait=off",
            "-device", f"virtserialport,chardev=rep,name={REPORT_PORT}",
        ]
        if self.cpu:
            cmd += ["-cpu", self.cpu]
        for i, (netdev, mac) in enumerate(self.nets):
            cmd += ["-netdev", f"{netdev},id=n{i}", "-device", f"virtio-net-pci,netdev=n{i},mac={mac}"]
        if not self.nets:
            cmd += ["-nic", "none"]
        return cmd + self._fwcfg_args() + self.extra, st, rep

    def start(self):
        cmd, st, rep = self.command()
        with open(os.path.join(self.dir, "qemu.cmd"), "w") as f:
            f.write(" ".join(cmd) + "\n")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(self.prefix + cmd, stdout=open(os.path.join(self.dir, "qemu.out"), "wb"),
                                     stderr=subprocess.STDOUT)
        threading.Thread(target=self._read_status, args=(st,), daemon=True).start()
        threading.Thread(target=self._read_report, args=(rep,), daemon=True).start()
        return self

    def connect(self, path):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return None
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(path)
                return s
            except OSError:
                time.sleep(0.02)
        return None

    def lines(self, path):
        """Each line the guest writes to the chardev socket `path`, as (seconds since power-on,
        bytes without the newline), until the guest closes it; nothing if it never opens."""
        s = self.connect(path)
        if not s:
            return
        buf = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield time.monotonic() - self.t0, line

    def _read_status(self, path):
        with open(os.path.join(self.dir, "status.log"), "ab") as logf:
            for t, line in self.lines(path):
                logf.write(f"{t:7.2f} ".encode() + line + b"\n")
                logf.flush()
                try:
                    obj = json.loads(line)
                except ValueError:
                    obj = {"unparsed": line.decode(errors="replace")}
                if isinstance(obj, dict) and "key" in obj and "phase" not in obj:
                    self.sets.append((t, obj))  # another guestinfo `set` (local-ipv4, redaction)
                    continue
                self.status.append((t, obj))
                for cb in self.listeners:
                    cb(self, t, obj)

    def _read_report(self, path):
        s = self.connect(path)
        if not s:
            return
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            self.report += chunk

    def on_status(self, cb):
        self.listeners.append(cb)

    def wait(self, timeout):
        """Wait for the guest to power off; kill it and return False on timeout."""
        try:
            self.proc.wait(timeout=timeout)
            self.ended = time.monotonic() - self.t0
            time.sleep(0.05)  # let the reader threads drain
            return True
        except subprocess.TimeoutExpired:
            self.kill()
            return False

    def wait_for(self, pred, timeout):
        """Wait until a status line satisfies pred (or the VM exits); returns the line or None."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, obj in list(self.status):
                if pred(obj):
                    return obj
            if self.proc.poll() is not None:
                time.sleep(0.05)
                return next((o for _, o in self.status if pred(o)), None)
            time.sleep(0.02)
        return None

    def wait_report(self, timeout):
        """Wait until the guest's report is a whole tar stream (a guest held with test.hold
        keeps the port open, so the end of the stream is tar's own: its trailing zero blocks,
        every member readable, no growth for a second). True when it is."""
        deadline = time.monotonic() + timeout
        seen = -1
        while time.monotonic() < deadline:
            data = bytes(self.report)
            if data and len(data) == seen and len(data) % 512 == 0 and data.endswith(bytes(1024)):
                try:
                    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
                        for m in tf.getmembers():
                            if m.isfile():
                                tf.extractfile(m).read()
                    return True
                except (tarfile.TarError, OSError):
                    pass
            seen = len(data)
            time.sleep(1)
        return False

    def kill(self):
        """Power cut: SIGKILL QEMU (nothing in the guest gets to flush)."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.ended = time.monotonic() - self.t0

    def phases(self):
        return [o.get("phase") for _, o in self.status]

    def first(self, phase):
        return next((t for t, o in self.status if o.get("phase") == phase), None)

    def last_status(self):
        return self.status[-1][1] if self.status else None

    def console(self):
        try:
            return open(os.path.join(self.dir, "console.log"), errors="replace").read()
        except OSError:
            return ""

    def report_tar(self):
        """The guest's report: {path: (TarInfo, bytes)}; empty when the guest sent none."""
        files = {}
        if not self.report:
            return files
        with open(os.path.join(self.dir, "report.tar"), "wb") as f:
            f.write(bytes(self.report))
        try:
            with tarfile.open(fileobj=io.BytesIO(bytes(self.report))) as tf:
                for m in tf.getmembers():
                    data = tf.extractfile(m).read() if m.isfile() else None
                    files["/" + m.name.lstrip("./").lstrip("/")] = (m, data)
        except tarfile.TarError as e:
            files["/<report error>"] = (None, str(e).encode())
        return files


# ---------------------------------------------------------------- guest data helpers


def fwcfg_guestinfo(metadata=None, userdata=None, userdata_encoding=None, extra=None):
    """fw_cfg entries (names below opt/) for guestinfo keys, as CAPV sets them on vSphere."""
    out = {}
    if metadata is not None:
        out["guestinfo.metadata"] = metadata
    if userdata is not None:
        out["guestinfo.userdata"] = userdata
    if userdata_encoding is not None:
        out["guestinfo.userdata.encoding"] = userdata_encoding
    out.update(extra or {})
    return out


def fwcfg_from_bundle(directory):
    """fw_cfg entries from a `nodeagent mint ... --format fwcfg` output directory
    (one file per guestinfo key, named `guestinfo.KEY`)."""
    out = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.isfile(path) and name.startswith("guestinfo."):
            out[name] = open(path, "rb").read()
    if "guestinfo.userdata" not in out:
        raise RuntimeError(f"no guestinfo.userdata in {directory}: {sorted(os.listdir(directory))}")
    return out
