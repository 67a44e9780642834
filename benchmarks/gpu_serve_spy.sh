[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets; export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Issue 17 on one H200: where the served step's host time goes at 32 streams (benchmarks/serve_spy.py: py-spy on
# rank 0 and one HTTP worker under `bench serve`), on issue 17's dense checkpoint. Needs py-spy (its manylinux
# wheel among the carried .whl/ wheels). Results in $OUT/spy/ (serve_spy.json, launch.log, raw samples).
# usage (repo root): OUT=dir bash benchmarks/gpu_serve_spy.sh
set -uo pipefail
OUT=${OUT:-/tmp/dcpctl-gpu-out}/spy; mkdir -p "$OUT"
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from pathlib import Path; from serve_peers import write_checkpoint
print(write_checkpoint('dense', Path('/tmp/dcpctl-spy-ckpt'), 'cuda'))" > "$OUT/write.log" 2>&1; echo "write rc=$?"
timeout 300 python3 benchmarks/serve_spy.py --out "$OUT" --concurrency 32 --requests 64 --input-len 1000 --output-len 64 -- \
  --model-path /tmp/dcpctl-spy-ckpt --device cuda --tp-size 1 --dcp-size 1 --page-size 64 --max-running-requests 32 \
  --max-total-tokens 80000 --dtype bfloat16 --cuda-graph-max-bs 32; echo "serve_spy rc=$?"
