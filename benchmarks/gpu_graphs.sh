#!/usr/bin/env bash
# Issue 17 on one H200, one call: the engine's CUDA-graph GPU tests, then served ITL with graphs and with
# --disable-cuda-graph against `bench decode`'s graph step, on the issue's checkpoint (V3 attention, 4 layers,
# dense MLP 2048, vocab 264, bf16), 1000-token prompts, 64 output tokens.  Needs .whl carried (the server's
# wheels).  Results: $OUT/graphs/*.json and logs.  Every part runs; each one's exit status is in status.txt.
#   usage (device): bash benchmarks/gpu_graphs.sh [CONCURRENCIES]     default "1 8 32"
[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 OMP_NUM_THREADS=4
O=${OUT:-/tmp/out}/graphs; mkdir -p "$O"; : > "$O/status.txt"
st() { echo "$1 rc=$2" >> "$O/status.txt"; }
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$O/install.log" 2>&1; st install $?
CONC=${1:-"1 8 32"}
DCPCTL_GPU_REPORT=$O timeout 300 python3 -m pytest -q tests/runtime/test_gpu_engine_graphs.py tests/runtime/test_gpu_norm.py tests/runtime/test_gpu_decode.py \
  > "$O/pytest.log" 2>&1; st pytest $?
M=/tmp/v3l4
python3 -c "from dcpctl.runtime.tiny import write_tiny_model; from dcpctl.bench.decode import SHAPES
write_tiny_model('$M', **dict(SHAPES['v3'], num_hidden_layers=4, first_k_dense_replace=4))" > "$O/write.log" 2>&1
st write $?
serve() {  # mode, extra launch flags
  local mode=$1; shift
  dcpctl launch --model-path $M --device cuda --port 30011 --max-total-tokens 140000 --max-running-requests 32 "$@" \
    > "$O/launch_$mode.log" 2>&1 &
  local pid=$!
  python3 - "$mode" $pid >> "$O/ready.txt" <<'PY'
import os, sys, time, urllib.request
t0 = time.time()
while time.time() - t0 < 300:
    try:
        urllib.request.urlopen("http://127.0.0.1:30011/health", timeout=2); break
    except Exception:
        try: os.kill(int(sys.argv[2]), 0)
        except OSError: break
        time.sleep(0.5)
t1 = time.time()
print(sys.argv[1], "ready_s", round(t1 - t0, 1))
# the first request after ready, then the same prompt length again (TTFT: first vs steady); the first one greedy,
# then the first sampled one (the API's default temperature, 1.0), then one of each again: the twelfth session's
# 1.34 s first request was a sampled one, and the warm-up decodes greedily
import json
for i, temp in enumerate((0.0, 1.0, 0.0, 1.0)):
    body = json.dumps({"model": "v3l4", "prompt": [1 + (i * 7 + j) % 250 for j in range(1000)], "max_tokens": 1,
                       "temperature": temp}).encode()
    t = time.time()
    try:
        urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:30011/v1/completions", body,
                                                      {"Content-Type": "application/json"}), timeout=60).read()
        print(sys.argv[1], f"ttft_request_{i}_temperature_{temp}_ms", round((time.time() - t) * 1e3, 1))
    except Exception as e:
        print(sys.argv[1], f"request_{i}_failed", e)
PY
  for c in $CONC; do
    timeout 240 dcpctl bench serve --url http://127.0.0.1:30011 --concurrency $c --requests $((c * 3 > 8 ? c * 3 : 8)) \
      --input-len 1000 --output-len 64 --format json > "$O/serve_${mode}_c$c.json" 2> "$O/serve_${mode}_c$c.err"
    st "serve_${mode}_c$c" $?
  done
  kill -INT $pid; wait $pid; st "launch_$mode" $?
}
[ -z "${SKIP_DIAG:-}" ] && PYTHONPATH=$PYTHONPATH timeout 200 python3 benchmarks/engine_overhead.py --model $M --batches $(echo $CONC | tr ' ' ,) \
  -o "$O/engine_overhead.json" > "$O/engine_overhead.log" 2>&1; st engine_overhead $?
[ -z "${SKIP_DIAG:-}" ] && for b in 1 32; do
  timeout 120 python3 benchmarks/step_profile.py --model $M --batch $b -o "$O/step_profile_b$b.json" \
    > "$O/step_profile_b$b.log" 2>&1; st "step_profile_b$b" $?
done
serve graph
[ -n "$GIL_EXPERIMENT" ] && DCPCTL_GIL_SWITCH_S=0.005 serve graph_gil5ms
serve eager --disable-cuda-graph
timeout 300 dcpctl bench decode --device cuda --tp-size 1 --shape v3 --layers 4 --dcp-sizes 1 --batches $(echo $CONC | tr ' ' ,) \
  --contexts 1000 --cuda-graphs --format json > "$O/decode.json" 2> "$O/decode.err"; st decode $?
cat "$O/status.txt"
