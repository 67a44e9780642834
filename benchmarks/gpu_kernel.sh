#!/usr/bin/env bash
# One device call: GPU tests of the local MLA kernel and fused merges, then `dcpctl bench kernel`
# (bf16 KV over the full grid, fp8 KV over the quick grid); logs, JSON and calibration go to $OUT.
# usage: OUT=dir benchmarks/gpu_kernel.sh [extra args for the bf16 run, e.g. --sweep]
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-/tmp/dcpctl-kernel-bench}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$OUT/gpu.txt"
cat "$OUT/gpu.txt"
python3 -m pytest -q -p no:cacheprovider -rA tests/runtime/test_triton_mla.py > "$OUT/tests.log" 2>&1
tail -3 "$OUT/tests.log"
bench() {  # name, args...
  local name=$1; shift
  python3 -m dcpctl.cli.main bench kernel "$@" --format json > "$OUT/$name.json" 2> "$OUT/$name.err"
  echo "$name rc=$?"; tail -2 "$OUT/$name.err"
}
bench kernel --save-calibration "$OUT/calibration.yaml" "$@" || true
if ! python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$OUT/kernel.json" 2>/dev/null; then
  mv "$OUT/kernel.err" "$OUT/kernel_failed.err"; bench kernel --save-calibration "$OUT/calibration.yaml"  # fall back to the shipped defaults
fi
bench kernel_fp8 --quick --kv-dtype fp8
for f in "$OUT"/kernel*.json; do
python3 - "$f" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(sys.argv[1], r["device"], r["kv_dtype"], r["calibration"], "configs", r["configs"])
for s in r["sweep"]:
    print("sweep", s)
print("H ctx B us roof_us bound frac naive_us splits")
for c in r["cells"]:
    print(c["heads"], c["ctx"], c["batch"], round(c["time_us"], 1), round(c["roofline_us"], 1), c["bound"],
          round(c["fraction"], 3), c.get("naive_us") and round(c["naive_us"], 1), c["splits"])
print("fraction min", round(r["fraction_min"], 3), "median", round(r["fraction_median"], 3))
PY
done
