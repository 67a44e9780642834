#!/usr/bin/env bash
# One device call on two GPUs (nvidia-h200-x2): the GPU tests, the kernel tile sweep over the full grid
# (its winners then drive every later kernel call through $DCPCTL_MLA_CONFIGS), the exchange
# micro-benchmark (packed / in place / raw) and DCP 1 vs DCP 2 decode at TP 2 with CUDA graphs.
# usage: OUT=dir benchmarks/gpu_x2.sh [--no-sweep]     (writes 5 files to $OUT; logs go to stdout)
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-/tmp/dcpctl-x2}
mkdir -p "$OUT"
export DCPCTL_GPU_REPORT=/tmp/dcpctl-reports DCPCTL_CACHE=/tmp/dcpctl-cache
mkdir -p "$DCPCTL_GPU_REPORT"
SWEEP=--sweep
[ "${1:-}" = "--no-sweep" ] && SWEEP=--no-sweep
dcp() { python3 -m dcpctl.cli.main "$@"; }
stamp() { echo "[$(date +%T)] $*"; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; nvidia-smi topo -m
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } 2>&1
stamp tests
python3 -m pytest -q -p no:cacheprovider -rA tests/runtime/test_triton_mla.py tests/runtime/test_gluon_mla.py tests/runtime/test_paged_attention.py \
  tests/runtime/test_paged_graphs.py tests/runtime/test_gpu_decode.py > "$OUT/tests.log" 2>&1
tail -3 "$OUT/tests.log"
cat "$DCPCTL_GPU_REPORT"/*.json 2>/dev/null | head -c 3000; echo
stamp "bench kernel $SWEEP"
dcp bench kernel $SWEEP --no-naive --save-calibration "$OUT/calibration.yaml" --format json > "$OUT/kernel.json" 2> /tmp/kernel.err
echo "kernel rc=$?"; grep -v "^sweep\|^cell" /tmp/kernel.err | tail -3
python3 - "$OUT/kernel.json" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
print("configs", r["configs"])
for s in r["sweep"]:
    print("sweep", s)
for h in sorted({c["heads"] for c in r["cells"]}):
    f = [c["fraction"] for c in r["cells"] if c["heads"] == h]
    big = [c["fraction"] for c in r["cells"] if c["heads"] == h and c["batch"] >= 32]
    print(f"H={h} fraction min {min(f):.3f} median {statistics.median(f):.3f} B>=32 median {statistics.median(big):.3f}")
PY
python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$OUT/kernel.json" && export DCPCTL_MLA_CONFIGS="$OUT/kernel.json"
stamp "bench exchange"
dcp bench exchange --dcp-size 2 --kernel-heads 128 --batches 1,8,32,64 --format json \
  --save-calibration "$OUT/calibration.yaml" > "$OUT/exchange.json" 2> /tmp/exchange.err
echo "exchange rc=$?"; tail -2 /tmp/exchange.err; python3 - "$OUT/exchange.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print({k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()})
PY
stamp "bench decode tp2 dcp 1,2"
dcp bench decode --device cuda --tp-size 2 --dcp-sizes 1,2 --shape v3 --dtype bfloat16 --batches 1,8,32,64 \
  --contexts 8192,32768,131072 --page-size 64 --cuda-graphs --steps 3 --warmup 1 --timeout 400 \
  -o "$OUT/decode2.json" > /tmp/decode2.log 2>&1
echo "decode rc=$?"; tail -30 /tmp/decode2.log
stamp done
