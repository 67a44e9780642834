#!/usr/bin/env bash
[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets; export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# One device call for block-FP8 serving (issue 19) on one H200, its parts' limits adding up to 560 s; every part runs, each
# one's exit status is appended to status.txt as it ends, and the whole results folder is packed into $OUT/i19g.tgz
# after every part (the device tool brings back only a few files):
#   gemm   benchmarks/fp8_gemm.py --modes w8a16 w8a16f w8a16b w8a8 --grouped: per DeepSeek-V3 shape and M the MMA
#          kernel (before) / few-rows kernel (gemv) / shipped choice (after) under w8a16 as shipped (TABLE_A16, the
#          auto MMA), the shipped choice under the fp16 MMA, the bf16 MMA and w8a8, cuBLAS bf16, the roofline, and the
#          grouped MoE GEMMs of a decode step (256 experts, top-8), in one process
#   tests  the GPU tests of the kernels (both methods), MoE dispatch, the FP8 model and its load bytes, the FP8 twin
#          (not the CPU interpreter and sm_90 compile checks: CI runs those)
#   trained_w8a16, trained_w8a8   benchmarks/fp8_model_check.py --trained --mode M: the built-in trained model
#          quantized block-FP8, FP8 kept vs dequantized bf16 vs float64 references
#   v3_write, v3_w8a16, v3_w8a8   benchmarks/fp8_model_check.py DIR --mode M: the DeepSeek-V3-shaped random
#          checkpoint (3 layers, 16 experts; drawn on the GPU once, then each method)
# usage: OUT=dir bash benchmarks/gpu_fp8.sh
set -u
cd "$(dirname "$0")/.." || exit 1
[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 DCPCTL_CACHE=/tmp/dcpctl-cache
R=/tmp/dcpctl-i19g
rm -rf "$R"; mkdir -p "$R" "${OUT:-/tmp/dcpctl-out}"
: > "$R/status.txt"
part() {  # name seconds command...: run it under a timeout, log it, append its exit status to status.txt at once
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" "$@" > "$R/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc ($((SECONDS - t0)) s)" | tee -a "$R/status.txt"; tail -n 60 "$R/$name.log"
  tar czf "${OUT:-/tmp/dcpctl-out}/i19g.tgz" -C "$R" .
}
part gemm 130 python3 benchmarks/fp8_gemm.py --modes w8a16 w8a16f w8a16b w8a8 --batches 1 8 16 32 64 --grouped \
  --json "$R/fp8_gemm.json"
part tests 170 python3 -m pytest -q -p no:cacheprovider -rfE -k "not interpreter and not compiles" \
  tests/runtime/test_fp8_gemm.py tests/runtime/test_moe_dispatch.py tests/runtime/test_model_fp8.py \
  tests/runtime/test_weight_bytes.py
for m in w8a16 w8a8; do
  part "trained_$m" 35 python3 benchmarks/fp8_model_check.py --trained --mode $m --json "$R/trained_$m.json"
done
V3=/tmp/dcpctl-v3-fp8
part v3_write 40 python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from pathlib import Path
from fp8_model_check import write_checkpoint; print(write_checkpoint(Path('$V3'), 3, 16))"
for m in w8a16 w8a8; do
  part "v3_$m" 75 python3 benchmarks/fp8_model_check.py $V3 --mode $m --json "$R/v3_$m.json"
done
cat "$R/status.txt"
