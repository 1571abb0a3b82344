#!/usr/bin/env python3
"""Inputs of the decode vectors (decode_vectors.json) for nodeagent's decode::decode_value.
Their stored results are regression rows, not the oracle: decode.rs checks them live against
cloud-init's own DataSourceVMware (22.4 and 25.1, transport_data/cloudinit_guestinfo.py) and
rewrites them from 22.4 under DECODE_VECTORS_REGEN=1. The model below only wrote the first
rows (cloud-init 22.4 agreed with all 700); it is a Python model of the VMware datasource's
value handling (docs/formats.md A.5):
value and encoding are rstrip()-ed, empty/'---' is absent, the encoding is matched
case-sensitively, base64 is base64.b64decode (non-validating), gzip+base64 gunzips
leniently (gzip.GzipFile; any failure returns the input), and the result must be UTF-8.
Only UTF-8 raw values are generated (cloud-init would substitute U+FFFD for others;
nodeagent rejects them, tested separately).
Regenerate: python3 gen_decode_vectors.py > decode_vectors.json (deterministic seed).
"""
import base64, gzip, io, json, random, sys

def none_if_empty(val):
    val = val.rstrip()
    return None if val == "" or val == "---" else val

def b64d(s):
    out = base64.b64decode(s)
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        return out

def decomp_gzip_lenient(data):
    try:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        with gzip.GzipFile(None, "rb", 1, io.BytesIO(raw)) as gh:
            return gh.read().decode("utf-8")
    except Exception:
        return data

def as_text(v):
    return v.decode("utf-8") if isinstance(v, bytes) else v

def model(raw, enc):
    val = none_if_empty(raw)
    if val is None:
        return {"absent": True}
    enc_type = none_if_empty(enc) if enc is not None else None
    try:
        if enc_type in ("gzip+base64", "gz+b64"):
            out = decomp_gzip_lenient(b64d(val))
        elif enc_type in ("base64", "b64"):
            out = b64d(val)
        else:
            out = val
        return {"text": as_text(out)}
    except Exception as e:
        return {"error": type(e).__name__}

rng = random.Random(20261121)
ws = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u2028", "\u3000"]
text_pool = list("abcXYZ019 -:#\n\u00e9\u4e2d") + ws

def rtext(n):
    return "".join(rng.choice(text_pool) for _ in range(rng.randrange(n)))

def suffix():
    return "".join(rng.choice(ws) for _ in range(rng.randrange(4)))

def gz(b):
    return gzip.compress(b, mtime=0)

encs = [None, "", " ", "---", "--- \n", "base64", "b64\n", "gzip+base64", "gz+b64 ", "Base64",
        "gzip", " base64", "b64+gz", "GZIP+BASE64", "base64\u3000"]
vectors = []
for i in range(700):
    kind = i % 7
    t = rtext(30)
    if kind == 0:
        raw = t + suffix()
    elif kind == 1:
        raw = rng.choice(["", "---", "-- -", "---x", " ---", "----"]) + suffix()
    elif kind == 2:
        raw = base64.b64encode(t.encode()).decode() + suffix()
    elif kind == 3:
        raw = base64.b64encode(gz(t.encode())).decode() + suffix()
    elif kind == 4:
        bad = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 12)))
        raw = base64.b64encode(rng.choice([bad, gz(bad)])).decode()
    elif kind == 5:
        b = list(base64.b64encode(t.encode()).decode())
        for _ in range(rng.randrange(4)):
            b.insert(rng.randrange(len(b) + 1), rng.choice([" ", "\n", "=", "!", "-"]))
        raw = "".join(b) + suffix()
    else:
        g = bytearray(gz(t.encode()))
        if g:
            g = g[: rng.randrange(len(g) + 1)]  # truncated or intact gzip
        raw = base64.b64encode(bytes(g)).decode()
    enc = rng.choice(encs)
    vectors.append({"raw": raw, "enc": enc, **model(raw, enc)})
json.dump({"python": sys.version.split()[0], "vectors": vectors}, sys.stdout, indent=0, ensure_ascii=True)
print()
