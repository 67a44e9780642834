[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets; export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Issue 17's serving path on one H200 machine: the HTTP side alone (benchmarks/http_overhead.py: a fake 1.1 ms
# engine step, the real frontend processes, --tokenizer-worker-num 1/2/4, concurrency 8/32), then the real server
# on issue 17's dense checkpoint (benchmarks/gpu_serve.sh trimmed: graph server, first/steady TTFT, c = 1/8/32,
# the bench decode graph step). Results under $OUT/http/.
# usage (repo root): OUT=dir [WORKERS=N: --tokenizer-worker-num, else launch's default] bash benchmarks/gpu_http.sh
set -uo pipefail
OUT=${OUT:-/tmp/dcpctl-gpu-out}
mkdir -p "$OUT/http"
OUT=$OUT bash benchmarks/gpu_http_only.sh
CELLS=dense VARIANTS=graph HF_MODES= BUDGET_S=${BUDGET_S:-170} SERVE_ARGS="${WORKERS:+--tokenizer-worker-num $WORKERS}" \
  bash benchmarks/gpu_serve.sh > "$OUT/http/gpu_serve.log" 2>&1
echo "gpu_serve rc=$?"; tail -30 "$OUT/http/gpu_serve.log"
