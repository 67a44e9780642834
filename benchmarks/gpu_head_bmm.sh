[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets; export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Issue 17 on one H200: the head_bmm kernel (runtime/models/head_bmm_triton.py) in its GPU tests, then the CUDA-graph
# decode step with it on and off (benchmarks/fusion_ab.py: graph ms, predicted ms, ratio per batch, one run).
# Run in session 9 (one H200, fusion_ab on/off in one call): 0.697 / 0.743 / 0.837 ms on vs 0.711 / 0.754 / 0.838 off at
# batch 1 / 8 / 32 (main: benchmarks/data/h200_step_head_bmm_ab_s9.json): 1-2% at 1 and 8, none at 32; merged in session 10
# (on by default; DCPCTL_UNFUSED=head_bmm turns it off). Results in $OUT/head_bmm/.
# usage (repo root): OUT=dir bash benchmarks/gpu_head_bmm.sh
set -uo pipefail
OUT=${OUT:-/tmp/dcpctl-gpu-out}/head_bmm; mkdir -p "$OUT"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/runtime/test_gpu_step_fusions.py > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; grep -E "FAILED|passed|failed" "$OUT/tests.log" | tail -6
timeout 300 python3 benchmarks/fusion_ab.py --variants fused,head_bmm --batches 1,8,32 -o "$OUT/fusion_ab.json" > "$OUT/fusion_ab.log" 2>&1
echo "fusion_ab rc=$?"; tail -12 "$OUT/fusion_ab.log"
