#!/usr/bin/env bash
# One device call (one H200): GPU tests of the Gluon and Triton MLA kernels, then `dcpctl bench kernel
# --sweep` over the Triton and Gluon candidates for 64 and 128 kernel heads; logs and JSON go to $OUT.
# usage: OUT=dir benchmarks/gpu_gluon.sh [extra args for bench kernel]
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-/tmp/dcpctl-gluon-bench}
mkdir -p "$OUT"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/runtime/test_gluon_mla.py > "$OUT/tests_gluon.log" 2>&1
tail -15 "$OUT/tests_gluon.log"
timeout 400 python3 -m dcpctl.cli.main bench kernel --sweep --no-naive --heads 64,128 --contexts 8K,32K,128K \
  --batches 1,8,32,64 "$@" --format json > "$OUT/kernel_gluon.json" 2> "$OUT/kernel_gluon.err"
echo "bench rc=$?"; grep -i "error\|sweep" "$OUT/kernel_gluon.err" | cut -c1-300 | tail -30
python3 - "$OUT/kernel_gluon.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(r["device"], r["calibration"], "configs", r["configs"])
print("H ctx B us roof_us bound frac splits")
for c in r["cells"]:
    print(c["heads"], c["ctx"], c["batch"], round(c["time_us"], 1), round(c["roofline_us"], 1), c["bound"],
          round(c["fraction"], 3), c["splits"])
print("fraction min", round(r["fraction_min"], 3), "median", round(r["fraction_median"], 3))
PY
