[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets; export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# One device call on one H200 (issue 45): the block-FP8 V3-shaped checkpoint and its bf16 twin served side by side
# (benchmarks/fp8_serve.py: bench serve at concurrency 1/8/32/64, 200 requests each, start to ready, memory).
# Results: $OUT/fp8serve/fp8_serve.json, fp8_serve.md, logs/.
# usage (repo root): OUT=dir bash benchmarks/gpu_fp8_serve.sh      (BUDGET_S=470 by default)
# CPU check of the same script (tiny trained model, CPU servers): SMOKE=1 OUT=/tmp/x bash benchmarks/gpu_fp8_serve.sh
set -uo pipefail
# the device has no fastapi/uvicorn/pydantic: the lead carries their wheels in .whl/
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/dcpctl-gpu-out}/fp8serve
mkdir -p "$OUT"
WORK=/tmp/dcpctl-fp8-work    # checkpoints (7.5 GB) and Triton caches: not results
args=(--out "$OUT" --work "$WORK" --budget-s "${BUDGET_S:-470}")
[ -n "${SMOKE:-}" ] && args+=(--smoke)
python3 benchmarks/fp8_serve.py "${args[@]}" > "$OUT/run.log" 2>&1
echo "fp8_serve rc=$?"
rm -rf "$WORK"
tail -30 "$OUT/run.log"
