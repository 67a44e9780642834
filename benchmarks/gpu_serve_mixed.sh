[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets; export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# One device call on one H200 (issue 41): the scheduler under real traffic (benchmarks/serve_mixed.py's cells),
# then the GPU test of retraction with pipelined graph steps. Results: $OUT/mixed/mixed.json, logs/, gpu-tests.log.
# usage (repo root): OUT=dir bash benchmarks/gpu_serve_mixed.sh      trim with CELLS=stall,moe,early,dense1k BUDGET_S=480
# CPU check of the same script (tiny checkpoint, CPU servers): SMOKE=1 OUT=/tmp/x bash benchmarks/gpu_serve_mixed.sh
set -uo pipefail
if ls .whl/*.whl > /dev/null 2>&1; then   # the device has no fastapi/uvicorn/pydantic: the lead carries their wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 DCPCTL_CACHE=/tmp/dcpctl-cache
OUT=${OUT:-/tmp/dcpctl-gpu-out}/mixed
mkdir -p "$OUT"
args=(--out "$OUT" --budget-s "${BUDGET_S:-480}" --cells "${CELLS:-stall,moe,early,dense1k}")
[ -n "${SMOKE:-}" ] && args+=(--smoke)
python3 benchmarks/serve_mixed.py "${args[@]}" > "$OUT/run.log" 2>&1
echo "serve_mixed rc=$?"
tail -40 "$OUT/run.log"
if [ -z "${SMOKE:-}" ]; then
  DCPCTL_GPU_REPORT=$OUT python3 -m pytest -q -m gpu tests/runtime/test_gpu_engine_graphs.py > "$OUT/gpu-tests.log" 2>&1
  echo "gpu tests rc=$?"; tail -5 "$OUT/gpu-tests.log"
fi
