#!/usr/bin/env bash
[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets; export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# One device call for block-FP8 serving (issue 19), about 3-4 minutes on one H200; every part runs, each
# one's exit status goes to $OUT/i19g/status.json:
#   gemm   benchmarks/fp8_gemm.py --sweep --grouped: MMA kernel (before) / few-rows kernel (gemv) / shipped
#          choice (after) / cuBLAS bf16 / roofline per DeepSeek-V3 shape and M, the few-rows settings swept at
#          M = 1 and 8, and the grouped MoE GEMMs of a decode step (256 experts, top-8), in one process
#   tests  the GPU tests of the kernels, MoE dispatch, the FP8 model and its load bytes (not the CPU
#          interpreter and sm_90 compile checks: CI runs those)
#   model  benchmarks/fp8_model_check.py --trained: the built-in trained model quantized block-FP8, FP8 kept
#          vs dequantized bf16 vs float64 references
# usage: OUT=dir bash benchmarks/gpu_fp8.sh
set -u
cd "$(dirname "$0")/.." || exit 1
[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 DCPCTL_CACHE=/tmp/dcpctl-cache
R="${OUT:-/tmp/dcpctl-out}/i19g"
mkdir -p "$R"
declare -A rc
part() {  # name seconds command...: run it under a timeout, log it, keep its exit status
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" "$@" > "$R/$name.log" 2>&1
  rc[$name]=$?
  echo "== $name rc=${rc[$name]} ($((SECONDS - t0)) s)"; tail -n 80 "$R/$name.log"
}
part gemm 175 python3 benchmarks/fp8_gemm.py --sweep --sweep-m 1 8 --budget-s 75 --grouped --table \
  --json "$R/fp8_gemm.json"
part tests 100 python3 -m pytest -q -p no:cacheprovider -rfE -k "not interpreter and not compiles" \
  tests/runtime/test_fp8_gemm.py tests/runtime/test_moe_dispatch.py tests/runtime/test_model_fp8.py \
  tests/runtime/test_weight_bytes.py
part model 60 python3 benchmarks/fp8_model_check.py --trained --json "$R/fp8_model_check.json"
printf '{"gemm": %s, "tests": %s, "model": %s}\n' "${rc[gemm]}" "${rc[tests]}" "${rc[model]}" | tee "$R/status.json"
