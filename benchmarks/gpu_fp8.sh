#!/usr/bin/env bash
[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets; export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# One device call for block-FP8 serving (issue 19), about 4 minutes on one H200; every part runs, each
# one's exit status goes to $OUT/fp8/status.json:
#   gemm   benchmarks/fp8_gemm.py --sweep: before (BEFORE_TILES) / after (the shipped table) / cuBLAS bf16 /
#          roofline per DeepSeek-V3 shape and M in one process, so the ratios come from one run
#   model  benchmarks/fp8_model_check.py: a V3-shaped FP8 checkpoint, fp8 vs bf16 vs float64 references
#   tests  the GPU tests of the kernel, load bytes, MoE dispatch and the FP8 model
# usage: OUT=dir bash benchmarks/gpu_fp8.sh
set -u
cd "$(dirname "$0")/.." || exit 1
[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 DCPCTL_CACHE=/tmp/dcpctl-cache
R="${OUT:-/tmp/dcpctl-out}/fp8"
mkdir -p "$R"
declare -A rc
part() {  # name seconds command...: run it under a timeout, log it, keep its exit status
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" "$@" > "$R/$name.log" 2>&1
  rc[$name]=$?
  echo "== $name rc=${rc[$name]} ($((SECONDS - t0)) s)"; tail -n 60 "$R/$name.log"
}
part gemm 150 python3 benchmarks/fp8_gemm.py --sweep --budget-s 80 --table --json "$R/fp8_gemm.json"
part model 150 python3 benchmarks/fp8_model_check.py /tmp/v3-fp8 --profile --json "$R/fp8_model_check.json"
part tests 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/runtime/test_fp8_gemm.py \
  tests/runtime/test_weight_bytes.py tests/runtime/test_moe_dispatch.py tests/runtime/test_model_fp8.py
printf '{"gemm": %s, "model": %s, "tests": %s}\n' "${rc[gemm]}" "${rc[model]}" "${rc[tests]}" | tee "$R/status.json"
