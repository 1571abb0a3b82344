#!/usr/bin/env python3
"""Reference vectors for nodeagent's non-validating base64 (decode::py_b64decode).

Each vector is a random ASCII string built from data characters, '=', whitespace and
garbage, with CPython's base64.b64decode(str) result: hex output, or the error class
("length" for the 1-more-than-multiple-of-4 error, "padding" for incorrect padding).
Regenerate: python3 gen_b64_vectors.py > b64_vectors.json (deterministic seed).
"""
import base64, binascii, json, random, sys

rng = random.Random(20261121)
alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
noise = " \n\t\r-_.!*~#\x00\x7f"
vectors = []
for i in range(600):
    kind = i % 3
    if kind == 0:
        # valid encoding with noise sprinkled in
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
        s = list(base64.b64encode(raw).decode())
        for _ in range(rng.randrange(0, 8)):
            s.insert(rng.randrange(len(s) + 1), rng.choice(noise))
        s = "".join(s)
    elif kind == 1:
        # valid encoding with '=' and noise anywhere, sometimes truncated
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 20)))
        s = list(base64.b64encode(raw).decode())
        for _ in range(rng.randrange(0, 4)):
            s.insert(rng.randrange(len(s) + 1), rng.choice("=" + noise))
        if s and rng.random() < 0.3:
            s = s[: rng.randrange(len(s))]
        s = "".join(s)
    else:
        # pure random soup
        pool = alpha + "====" + noise
        s = "".join(rng.choice(pool) for _ in range(rng.randrange(0, 24)))
    try:
        out = {"ok": base64.b64decode(s).hex()}
    except binascii.Error as e:
        out = {"err": "length" if "cannot be 1 more" in str(e) else "padding"}
    vectors.append({"in": s, **out})
json.dump({"python": sys.version.split()[0], "vectors": vectors}, sys.stdout, indent=0)
print()
