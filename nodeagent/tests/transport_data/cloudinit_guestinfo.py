"""The live decode oracle: cloud-init's own DataSourceVMware reading guestinfo, run by a
Debian cloud-init root's python3 chrooted into that root (decode.rs starts it; nothing of
cloud-init is re-created here).

Reads {"vectors": [{"raw", "enc" | null}]} on stdin (the inputs of decode_vectors.json) and
prints {"cloud_init", "results": [{"absent": true} | {"text"} | {"error": exception name}]}.

For each vector, `raw` is the value of `guestinfo.userdata` and `enc` (when not null) that of
`guestinfo.userdata.encoding`, served by a fake `vmware-rpctool` (a shell script over one file
per key, printing it as the real tool does; "No value found" on stderr, exit 1, for a key
that is not set) made in the scratch directory; cloud-init's `guestinfo("userdata", ...)` reads
them through its own `subp` call, `guestinfo_get_value` (rstrip, "---" and blank as absent) and
`decode` (base64, gzip+base64, plain text, UTF-8).
"""
import inspect
import json
import logging
import os
import sys
import tempfile

from cloudinit import version
from cloudinit.sources import DataSourceVMware as ds

FAKE_RPCTOOL = """#!/bin/sh
case $1 in
  "info-get guestinfo."*) f="$GUESTINFO_DIR/${1#info-get }" ;;
  *) echo "fake vmware-rpctool: unexpected $*" >&2; exit 2 ;;
esac
[ -f "$f" ] || { printf 'No value found' >&2; exit 1; }
exec cat "$f"
"""


def main():
    vectors = json.load(sys.stdin)["vectors"]
    # cloud-init logs an empty key at ERROR level ("Failed to get guestinfo value"): not output.
    logging.getLogger().addHandler(logging.NullHandler())
    scratch = tempfile.mkdtemp()
    tool = os.path.join(scratch, "vmware-rpctool")
    with open(tool, "w") as f:
        f.write(FAKE_RPCTOOL)
    os.chmod(tool, 0o755)
    # 22.4: guestinfo(key, vmware_rpctool); 24.1+: guestinfo(key, rpctool, rpctool_fn).
    if len(inspect.signature(ds.guestinfo).parameters) == 3:
        def read(key):
            return ds.guestinfo(key, tool, ds.exec_vmware_rpctool)
    else:
        def read(key):
            return ds.guestinfo(key, tool)
    results = []
    for i, v in enumerate(vectors):
        d = os.path.join(scratch, str(i))
        os.mkdir(d)
        with open(os.path.join(d, "guestinfo.userdata"), "w", encoding="utf-8", newline="") as f:
            f.write(v["raw"])
        if v["enc"] is not None:
            with open(os.path.join(d, "guestinfo.userdata.encoding"), "w", encoding="utf-8", newline="") as f:
                f.write(v["enc"])
        os.environ["GUESTINFO_DIR"] = d
        try:
            out = read("userdata")
            results.append({"absent": True} if out is None else {"text": out})
        except Exception as e:  # what cloud-init's decode raises (binascii.Error, UnicodeDecodeError)
            results.append({"error": type(e).__name__})
    json.dump({"cloud_init": version.version_string(), "results": results}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
