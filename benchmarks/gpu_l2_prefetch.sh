#!/usr/bin/env bash
# Issue 17, one device call (one H200; the parts' limits add up to 530 s): does pulling the weights a layer reads after attention into L2
# while attention computes (runtime/models/l2_prefetch.py, off by default) shorten the CUDA-graph decode step?
#   tests       the prefetch's GPU tests (the model's output unchanged, on the step's stream and on its own; inside a
#               CUDA graph) and the step fusions' GPU tests
#   ab          benchmarks/fusion_ab.py on the issue's checkpoint (V3 attention, 4 dense layers, bf16, ctx 1032),
#               batches 1/8/32, one process: prefetch off, w_vc alone, w_vc + 1/8, 1/4, 1/2 of o_proj, the 1/8 plan on
#               a stream of its own, cuBLASLt instead of cuBLAS (prefetch off), and off again last (the drift)
#   step_gemms  benchmarks/step_gemms.py: each GEMM of the step in a CUDA graph against its copy roofline, cuBLAS and
#               cuBLASLt
# Every part runs; each one's exit status is in $OUT/l2/status.txt.   usage: OUT=dir bash benchmarks/gpu_l2_prefetch.sh
set -u
cd "$(dirname "$0")/.." || exit 1
[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4 DCPCTL_CACHE=/tmp/dcpctl-cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/dcpctl-out}/l2; mkdir -p "$O"; : > "$O/status.txt"; T0=$SECONDS
part() { local name=$1 lim=$2; shift 2; timeout "$lim" "$@" > "$O/$name.log" 2>&1
  echo "$name rc=$? t=$((SECONDS - T0))s" | tee -a "$O/status.txt"; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  git log -1 --format='%H %s' 2>/dev/null; } > "$O/env.log" 2>&1
part tests 100 python3 -m pytest -q -p no:cacheprovider -rfEs tests/runtime/test_l2_prefetch.py \
  tests/runtime/test_gpu_step_fusions.py
M=/tmp/dcpctl-l2-v3l4
part write 60 python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from pathlib import Path
from fusion_ab import write_checkpoint; print(write_checkpoint(Path('$M')))"
P=DCPCTL_L2_PREFETCH
part ab 300 python3 benchmarks/fusion_ab.py --model $M --variants "" --batches 1,8,32 -o "$O/ab.json" \
  --env-variant "off=DCPCTL_UNFUSED=l2_prefetch" --env-variant "vc=$P=w_vc:1" \
  --env-variant "o8=$P=w_vc:1+o_proj:0.125" --env-variant "o4=$P=w_vc:1+o_proj:0.25" \
  --env-variant "o2=$P=w_vc:1+o_proj:0.5" --env-variant "o8_side=$P=w_vc:1+o_proj:0.125;${P}_OPTS=side=1" \
  --env-variant "lt=DCPCTL_UNFUSED=l2_prefetch;BLAS=cublaslt" --env-variant "off_again=DCPCTL_UNFUSED=l2_prefetch"
part step_gemms 70 python3 benchmarks/step_gemms.py -o "$O/step_gemms.json"
grep "B=" "$O/ab.log"; tail -3 "$O/tests.log"; cat "$O/status.txt"
