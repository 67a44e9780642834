[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets; export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# One device call on one H200 (issue 17): `dcpctl launch --device cuda` + `dcpctl bench serve` at concurrency
# 1/8/32 (graph and --disable-cuda-graph servers when launch has the flags), `bench decode --cuda-graphs` on the
# same shape, Hugging Face generate (benchmarks/hf_peer.py) on the same checkpoints, and the ratio table.
# Results: $OUT/serve/serve.json, serve.md, logs/ (one log per part), decode-*.json, hf-*.json.
# usage (repo root): OUT=dir bash benchmarks/gpu_serve.sh
#   trim with CELLS=dense,dense32k,moe  VARIANTS=graph,eager  HF_MODES=compiled,eager (empty: no HF)  BUDGET_S=360
#   SERVE_ARGS="--tokenizer-worker-num 4": more `dcpctl launch` flags for every server
# CPU check of the same script (tiny checkpoint, CPU server): SMOKE=1 OUT=/tmp/x bash benchmarks/gpu_serve.sh
set -uo pipefail
# the device has no fastapi/uvicorn/pydantic: the lead carries their wheels in .whl/
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 DCPCTL_CACHE=/tmp/dcpctl-cache
OUT=${OUT:-/tmp/dcpctl-gpu-out}/serve
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
  python3 -c "import fastapi, uvicorn; print('fastapi', fastapi.__version__, 'uvicorn', uvicorn.__version__)"
  python3 -m dcpctl.cli.main launch --help | grep -i cuda-graph; } > "$OUT/env.log" 2>&1
echo "env rc=$?"; cat "$OUT/env.log"
args=(--out "$OUT" --variants "${VARIANTS:-graph,eager}" --hf-modes "${HF_MODES-compiled,eager}" --budget-s "${BUDGET_S:-360}")
[ -n "${CELLS:-}" ] && args+=(--cells "$CELLS")       # default: dense,dense32k,moe (smoke: tiny)
[ -n "${SMOKE:-}" ] && args+=(--smoke)
[ -n "${SERVE_ARGS:-}" ] && args+=(--serve-args "$SERVE_ARGS")   # e.g. SERVE_ARGS="--tokenizer-worker-num 4"
python3 benchmarks/serve_peers.py "${args[@]}" > "$OUT/run.log" 2>&1
echo "serve_peers rc=$?"
tail -25 "$OUT/run.log"
