#!/usr/bin/env bash
# Process wall time of `nodeagent mint` next to the openssl command line doing the same work,
# in one run, so the ratio is measured under the same machine load.
#
#   bench/mint-vs-openssl.sh [RUNS]        (default 15 runs per row; prints the median)
#
# Rows:
#   pki ALG      nodeagent mint pki (3 CAs + SA key pair)    vs  openssl: 4 key generations, 3 `req -x509`
#                with CAPI's extensions, 1 `pkey -pubout`  (the same eight files, PKCS#1/SEC1 keys)
#   1000 workers nodeagent mint bootstrap --nodes 1000 --format dir, once to the work disk and
#                once to tmpfs (/dev/shm), which separates the filesystem's file-creation cost (4000 files + 1000 token
#                Secrets, written atomically, not fsynced: no private keys in worker bundles)
#                vs  openssl: only the 1000 bootstrap tokens (`openssl rand`), no userdata at all
#   baseline     process start + one token (`nodeagent mint token` vs `openssl rand`): how much
#                of each row is the machine's scheduling latency rather than the work
# Needs a release build: cargo build --release -p nodeagent
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-15}
BIN=${NODEAGENT:-target/release/nodeagent}
[ -x "$BIN" ] || { echo "build first: cargo build --release -p nodeagent" >&2; exit 1; }
command -v openssl >/dev/null || apt-get install -y -q openssl >/dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

now_ns() { date +%s%N; }

# median of the numbers on stdin
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# time_ms CMD... : run once, print wall milliseconds (3 decimals)
time_ms() {
    local t0 t1
    t0=$(now_ns)
    if ! "$@" >/dev/null 2>>"$WORK/stderr"; then echo "FAILED: $*" >>"$WORK/failures"; fi
    t1=$(now_ns)
    awk -v d=$((t1 - t0)) 'BEGIN {printf "%.3f\n", d / 1e6}'
}

openssl_key() { # ALG OUT
    case $1 in
        ecdsa-p256) openssl ecparam -name prime256v1 -genkey -noout -out "$2" ;;
        ecdsa-p384) openssl ecparam -name secp384r1 -genkey -noout -out "$2" ;;
        rsa-2048) openssl genrsa -traditional -out "$2" 2048 2>/dev/null ;;
        rsa-4096) openssl genrsa -traditional -out "$2" 4096 2>/dev/null ;;
    esac
}

openssl_pki() { # ALG DIR
    local alg=$1 d=$2
    rm -rf "$d"; mkdir -p "$d/etcd"
    for ca in ca etcd/ca front-proxy-ca; do
        openssl_key "$alg" "$d/$ca.key"
        openssl req -x509 -new -key "$d/$ca.key" -subj /CN=kubernetes -days 3650 -sha256 \
            -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
            -addext "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign" \
            -addext "subjectKeyIdentifier=hash" -out "$d/$ca.crt" 2>/dev/null
    done
    openssl_key "$alg" "$d/sa.key"
    openssl pkey -in "$d/sa.key" -pubout -out "$d/sa.pub"
}

nodeagent_pki() { "$BIN" mint pki --cluster bench --out "$2" --algorithm "$1" --force; }

openssl_tokens() { # 1000 tokens, the only part of the fleet job openssl can do
    for _ in $(seq 1000); do openssl rand -hex 11 >/dev/null; done
}

FLEETS=0
nodeagent_fleet() { # BASE: a fresh output directory per run, so no cleanup is timed
    FLEETS=$((FLEETS + 1))
    "$BIN" mint bootstrap --role worker --cluster bench --node md --endpoint 10.0.0.10:6443 \
        --kubernetes-version v1.31.2 --pki "$WORK/pki-ecdsa-p256" --out "$1/fleet-$FLEETS-$RANDOM" --nodes 1000
}

row() { # LABEL NODEAGENT_CMD OPENSSL_CMD
    local label=$1 ours theirs
    ours=$(for _ in $(seq "$RUNS"); do time_ms $2; done | median)
    theirs=$(for _ in $(seq "$RUNS"); do time_ms $3; done | median)
    awk -v l="$label" -v a="$ours" -v b="$theirs" 'BEGIN {printf "| %-22s | %12.3f | %12.3f | %16.1fx |\n", l, a, b, b / a}'
}

echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(openssl version | cut -d' ' -f1-2), runs=$RUNS (median)"
echo "| job                    | nodeagent ms | openssl ms   | openssl/nodeagent |"
echo "|------------------------|--------------|--------------|-------------------|"
row "baseline (one token)" "$BIN mint token" "openssl rand -hex 11"
for alg in ecdsa-p256 ecdsa-p384 rsa-2048; do
    mkdir -p "$WORK/pki-$alg"
    row "pki $alg" "nodeagent_pki $alg $WORK/pki-$alg" "openssl_pki $alg $WORK/ossl-$alg"
done
RUNS=$(( RUNS > 3 ? 3 : RUNS )) row "pki rsa-4096" "nodeagent_pki rsa-4096 $WORK/pki-rsa-4096" "openssl_pki rsa-4096 $WORK/ossl-rsa-4096"
RUNS=$(( RUNS > 3 ? 3 : RUNS )) row "1000 workers (disk)" "nodeagent_fleet $WORK" "openssl_tokens"
SHM=$(mktemp -d -p /dev/shm)
RUNS=$(( RUNS > 3 ? 3 : RUNS )) row "1000 workers (tmpfs)" "nodeagent_fleet $SHM" "openssl_tokens"
rm -rf "$SHM"
if [ -s "$WORK/failures" ]; then
    echo "some runs failed; their times above are meaningless:" >&2
    sort "$WORK/failures" | uniq -c >&2
    tail -5 "$WORK/stderr" >&2
    exit 1
fi
