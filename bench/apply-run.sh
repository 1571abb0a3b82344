#!/usr/bin/env bash
# Benchmark: a full `nodeagent run --root` of the real CABPK control-plane init userdata
# (shared corpus), release build, fsync on, root directory on the real disk (not tmpfs).
# Wall time with hyperfine, peak memory with /usr/bin/time -v. Results: BENCHMARKS.md "Apply alone: time, syncs, memory".
#   bench/apply-run.sh            # 100 runs
#   RUNS=20 bench/apply-run.sh    # quicker
set -euo pipefail
cd "$(dirname "$0")/.."
for p in hyperfine time; do dpkg -s "$p" >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null; done
cargo build --release -q -p nodeagent
BIN=$PWD/target/release/nodeagent
CORPUS=${CORPUS:-$PWD/../shared/corpus/capi}   # the shared corpus beside the repository
W=${BENCH_DIR:-$PWD/target/apply-bench}   # under target/: the real disk
rm -rf "$W"; mkdir -p "$W/d"
cp "$CORPUS/cabpk/rendered/controlplane-init-v1beta3-k8s-1.26.6.cloud-config.yaml" "$W/d/guestinfo.userdata"
# CAPV's dhcp4 metadata golden, with a real 6-octet MAC (the golden's test MAC is 5 octets,
# rejected in strict mode), so the run is strict and exits 0.
sed 's/00:00:00:00:00/00:50:56:00:00:01/' "$CORPUS/capv/metadata-golden-head/dhcp4.yaml" > "$W/d/guestinfo.metadata"
CMD="$BIN run --transport dir:$W/d --root $W/r"
$CMD >/dev/null 2>&1 || { echo "run failed:"; $CMD; exit 1; }
echo "steps: $(grep -c '"event":"done"' "$W"/r/var/lib/nodeagent/instances/*/journal.jsonl) done per run"
hyperfine -N --warmup 3 --runs "${RUNS:-100}" --prepare "rm -rf $W/r" "$CMD" --export-json "$W/hyperfine.json"
python3 - "$W/hyperfine.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
t = sorted(r["times"])
print(f"median {r['median']*1000:.2f} ms  mean {r['mean']*1000:.2f} ms  min {t[0]*1000:.2f} ms  p90 {t[int(len(t)*0.9)]*1000:.2f} ms  runs {len(t)}")
PY
peak=0
for i in 1 2 3 4 5; do
  rm -rf "$W/r"
  /usr/bin/time -v -o "$W/time.txt" $CMD >/dev/null 2>&1
  kb=$(awk '/Maximum resident/ {print $6}' "$W/time.txt")
  [ "$kb" -gt "$peak" ] && peak=$kb
done
echo "peak RSS (max of 5 runs): ${peak} KiB"
