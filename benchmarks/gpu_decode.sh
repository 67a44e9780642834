#!/usr/bin/env bash
# One device call: GPU decode tests (bf16 logits vs CPU fp64, graph replay, tiny greedy through the
# engine), then `dcpctl bench decode --device cuda --cuda-graphs` on the v3 shape (DCP 1, one GPU)
# with roofline predictions from ceilings measured in the same run, and `dcpctl bench capacity`.
# usage: OUT=dir benchmarks/gpu_decode.sh [extra args for bench decode]
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-/tmp/dcpctl-decode-bench}
mkdir -p "$OUT"
export DCPCTL_GPU_REPORT="$OUT" DCPCTL_CACHE=/tmp/dcpctl-cache
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  python3 -m pytest -q -p no:cacheprovider -rA tests/runtime/test_gpu_decode.py tests/runtime/test_paged_attention.py \
    tests/runtime/test_paged_graphs.py 2>&1; } > "$OUT/tests.log"
tail -5 "$OUT/tests.log"
python3 -m dcpctl.cli.main bench decode --device cuda --tp-size 1 --dcp-sizes 1 --shape v3 --dtype bfloat16 \
  --batches 1,8,32,64 --contexts 8192,32768,131072 --page-size 64 --cuda-graphs --steps 3 --warmup 1 --timeout 400 \
  -o "$OUT/decode.json" "$@" > "$OUT/decode.log" 2>&1
echo "bench decode rc=$?"; tail -40 "$OUT/decode.log"
python3 -m dcpctl.cli.main bench capacity --format json > "$OUT/capacity.json" 2>&1; echo "capacity rc=$?"
