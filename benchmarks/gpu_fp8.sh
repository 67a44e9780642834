#!/usr/bin/env bash
# One device call for block-FP8 serving: GPU tests of the FP8 GEMM, load bytes and MoE paths; the GEMM
# against bf16 and the weight-read roofline; a DeepSeek-V3-shaped FP8 checkpoint kept in FP8 vs
# dequantized; `dcpctl generate --device cuda` on that checkpoint.
# usage: OUT=dir benchmarks/gpu_fp8.sh       (needs the package installed: pip install --no-deps -e .)
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-/tmp/dcpctl-fp8}
mkdir -p "$OUT"
export DCPCTL_CACHE=/tmp/dcpctl-cache
python3 -m pytest -q -p no:cacheprovider -rfE tests/runtime/test_fp8_gemm.py tests/runtime/test_weight_bytes.py \
  tests/runtime/test_moe_dispatch.py tests/runtime/test_model_fp8.py > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; tail -15 "$OUT/tests.log"
python3 benchmarks/fp8_gemm.py --json "$OUT/fp8_gemm.json" "$@" 2>&1 | tee "$OUT/fp8_gemm.log"
python3 benchmarks/fp8_model_check.py /tmp/v3-fp8 --json "$OUT/fp8_model.json" > "$OUT/fp8_model.log" 2>&1
echo "model check rc=$?"; tail -30 "$OUT/fp8_model.log"
timeout 300 python3 -m dcpctl.cli.main generate --device cuda --model-path /tmp/v3-fp8 --prompt-ids 256,10,11,12 \
  --max-new-tokens 8 --temperature 0 --format json > "$OUT/generate.json" 2> "$OUT/generate.err"
echo "generate rc=$?"; cat "$OUT/generate.json" | head -c 600; echo; grep -i "dcpctl" "$OUT/generate.err" | head
