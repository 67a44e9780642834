[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets; export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Issue 17, the graph step's own speed, on one H200 (~3 minutes: BUDGET_S): the fused kernels' GPU tests, the CUDA-graph
# decode step with every fusion on / all off / each one off (benchmarks/fusion_ab.py, one process), `dcpctl bench
# decode --cuda-graphs` as shipped, the step's GEMMs one by one (benchmarks/step_gemms.py), kernel profiles of one step (at batch 1 and 32), then
# `pytest -m gpu tests/runtime`.  Every part runs; each one's exit status is in status.txt.
#   usage (repo root): OUT=dir bash benchmarks/gpu_17g.sh         results: $OUT/i17g/*.json, *.log, status.txt
export OMP_NUM_THREADS=4 PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}/i17g; mkdir -p "$O"; : > "$O/status.txt"
T0=$(date +%s)
st() { echo "$1 rc=$2 t=$(( $(date +%s) - T0 ))s" | tee -a "$O/status.txt"; }
# run NAME LIMIT_S CMD...: CMD under `timeout`, cut to what is left of BUDGET_S (default 180); skipped past it
run() { local name=$1 lim=$2; shift 2; local left=$(( ${BUDGET_S:-180} - ($(date +%s) - T0) ))
  if [ $left -lt 20 ]; then echo "$name skipped (budget)" | tee -a "$O/status.txt"; return; fi
  [ $lim -gt $left ] && lim=$left
  timeout $lim "$@" > "$O/$name.log" 2>&1; st "$name" $?; }
M=/tmp/i17g-v3l4
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  git log -1 --format='%H %s'; } > "$O/env.log" 2>&1

run pytest_fusions 90 python3 -m pytest -q -p no:cacheprovider tests/runtime/test_gpu_step_fusions.py \
  tests/runtime/test_gpu_norm.py
run write 60 python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from pathlib import Path
from fusion_ab import write_checkpoint; print(write_checkpoint(Path('$M')))"
run ab_all 120 python3 benchmarks/fusion_ab.py --model $M --variants fused,all --batches 1,8,32 -o "$O/ab_all.json"
run ab_each 120 python3 benchmarks/fusion_ab.py --model $M \
  --variants qkv_a,q_rope,kv_write,add_norm,v_out,swiglu,embed \
  --batches 1,32 -o "$O/ab_each.json"
run step_gemms 60 python3 benchmarks/step_gemms.py -o "$O/step_gemms.json"
run bench_decode 120 python3 -m dcpctl.cli.main bench decode --device cuda --cuda-graphs --tp-size 1 --dcp-sizes 1 \
  --shape v3 --layers 4 --dtype bfloat16 --page-size 64 --batches 1,8,32 --contexts 1032 --steps 5 --warmup 2 \
  -o "$O/decode.json"
for b in 1 32; do
  run "step_profile_b$b" 60 python3 benchmarks/step_profile.py --model $M --batch $b --context 1032 \
    -o "$O/step_profile_b$b.json"
done
run pytest_gpu 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/runtime
tail -3 "$O/pytest_gpu.log"
cat "$O/ab_all.log" "$O/ab_each.log"; grep -c "B=" "$O/step_gemms.log"
cat "$O/status.txt"
