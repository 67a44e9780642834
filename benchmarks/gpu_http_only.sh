[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets; export PYTHONPATH=$PWD
# The HTTP side alone on the GPU machine's CPUs (no GPU used): benchmarks/http_overhead.py, results in $OUT/http/.
set -uo pipefail
OUT=${OUT:-/tmp/dcpctl-gpu-out}; mkdir -p "$OUT/http"
nproc > "$OUT/http/nproc.txt"
python3 benchmarks/http_overhead.py --concurrency 8,32 --workers ${HTTP_WORKERS:-1,2,4} --out "$OUT/http/http_overhead.json" \
  > "$OUT/http/http_overhead.log" 2>&1
echo "http_overhead rc=$?"; cut -c1-600 "$OUT/http/http_overhead.log"
