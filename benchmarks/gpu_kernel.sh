#!/usr/bin/env bash
# One device call: GPU tests of the local MLA kernel and fused merges, then the kernel benchmark
# (tile sweep + grid + ceilings); logs, JSON and the calibration file go to $OUT.
# usage: OUT=dir benchmarks/gpu_kernel.sh [extra `dcpctl bench kernel` args, default --sweep]
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-/tmp/dcpctl-kernel-bench}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$OUT/gpu.txt"
cat "$OUT/gpu.txt"
python3 -m pytest -q -p no:cacheprovider tests/runtime/test_triton_mla.py 2>&1 | tee "$OUT/tests.log" | tail -15
args=("$@"); [ ${#args[@]} -eq 0 ] && args=(--sweep)
python3 -m dcpctl.cli.main bench kernel "${args[@]}" --format json --save-calibration "$OUT/calibration.yaml" \
  > "$OUT/kernel.json" 2> "$OUT/bench.err"
echo "bench rc=$?"; tail -5 "$OUT/bench.err"
python3 - "$OUT/kernel.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(r["device"], r["calibration"], "configs", r["configs"])
for s in r["sweep"]:
    print("sweep", s)
print("H ctx B us roof_us bound frac naive_us splits")
for c in r["cells"]:
    print(c["heads"], c["ctx"], c["batch"], round(c["time_us"], 1), round(c["roofline_us"], 1), c["bound"],
          round(c["fraction"], 3), c.get("naive_us") and round(c["naive_us"], 1))
print("fraction min", round(r["fraction_min"], 3), "median", round(r["fraction_median"], 3))
PY
