#!/usr/bin/env bash
# Device runs, one suite a call (each fits a 10-minute call on one H200; x2 needs two GPUs of one host).
# usage (repo root): OUT=dir bash benchmarks/gpu.sh SUITE [SUITE ...]
#   tests     every GPU test (pytest -m gpu); figures the tests measure go to $OUT/reports/
#   kernel    `dcpctl bench kernel` over every available backend; writes $OUT/kernel/attention.json (--save-table)
#   decode    `dcpctl bench decode --cuda-graphs` on the DeepSeek-V3 shape against its roofline, and `bench capacity`
#   step      the CUDA-graph decode step with each fusion off (fusion_ab.py) on a 4-layer V3-attention checkpoint
#   serve     `dcpctl launch` + `dcpctl bench serve` against the graph step and Hugging Face (serve_peers.py);
#             trim with CELLS=dense,dense32k,moe VARIANTS=graph,eager HF_MODES=compiled,eager BUDGET_S=360
#   prefill   single-prompt prefill at 4K-64K against transformers and the cuDNN MHA-form floor (prefill_ttft.py)
#   mixed     the scheduler under real traffic (serve_mixed.py): streams + 16K arrivals, Poisson MoE, early stops;
#             trim with CELLS=stall,moe,early,dense1k BUDGET_S=480 STALL_REPEATS=3 STALL_WARMUP=1
#   fp8serve  the block-FP8 checkpoint and its bf16 twin served side by side (fp8_serve.py; BUDGET_S=470)
#   fp8       the block-FP8 GPU tests, the GEMM sweep (writes $OUT/fp8/fp8_gemm.json) and the model check
#   fp8grouped  the grouped MoE GEMMs' tile sweep at decode's rows per expert (V3's routed experts, 16 of them
#             top-8 as fp8serve serves, w8a16) against torch._grouped_mm; writes $OUT/fp8grouped/fp8_gemm.json: this
#             GPU's shipped fp8_gemm table with a grouped_w8a16 section (docs/fp8.md)
#   gemm16    the 16-bit split-K GEMM sweep against cuBLAS (writes $OUT/gemm16/gemm16.json)
#   head_bmm  the per-head bmm sweep against torch.bmm (writes $OUT/head_bmm/head_bmm.json)
#   tiles     `dcpctl bench tiles`: ours' tile sweep per kernel-head count (writes $OUT/tiles/mla_tiles.json)
#   x2        two GPUs: DCP 2 against DCP 1 at TP 2 and the packed a2a exchange against a raw all_to_all
#   rank      `dcpctl bench rank` (docs/bench-rank.md): tp1, TP 1 on a 4-layer V3-attention MoE checkpoint, its step
#             against the served engine's; v31, rank 0 of DeepSeek-V3.1 TP 8 + DCP 8 (FP8); k2, rank 0 of Kimi K2
#             TP 16 + DCP 8; each at batches 1/8/32/64 x contexts 8K/32K/128K, both routings; then
#             benchmarks.rank_check's verdicts.  Trim with RANK_PARTS=flashmla,tp1,v31 (the default; a second call
#             RANK_PARTS=k2: Kimi K2 at 32 kernel heads runs page 1, without FlashMLA); on an H100 RANK_LAYERS=N
#             runs the first N layers (--layers)
# The machine's environment (carried wheels and sources, NVLink multicast off) is tools/gpu_env.sh's `setup`; FlashMLA
# builds on first use. Every part logs to $OUT/<suite>/<part>.log and prints its exit status.
set -uo pipefail
cd "$(dirname "$0")/.."
. tools/gpu_env.sh setup --no-build || exit 1
OUT=${OUT:-/tmp/dcpctl-gpu}
DCPCTL="python3 -m dcpctl.cli.main"

part() {   # part NAME SECONDS COMMAND...: one timed part, its log, its exit status
  local name=$1 secs=$2; shift 2
  timeout "$secs" "$@" > "$O/$name.log" 2>&1
  echo "$SUITE/$name rc=$?"; tail -5 "$O/$name.log"
}

v3_checkpoint() {   # the 4-layer DeepSeek-V3-attention bf16 checkpoint the step and serve figures use
  python3 -c "from pathlib import Path; from benchmarks.fusion_ab import write_checkpoint
print(write_checkpoint(Path('$1')))"
}

rank_checkpoint() {   # 4 layers of V3 attention, 1 dense + 3 MoE (serve_peers' MOE experts): bench rank's TP 1 check
  python3 -c "from pathlib import Path
from benchmarks.serve_peers import MOE, write_bf16
from dcpctl.bench.decode import SHAPES
print(write_bf16(Path('$1'), dict(SHAPES['v3'], num_hidden_layers=4, max_position_embeddings=40960, **MOE), 'cuda'))"
}

rank_part() {   # rank_part NAME SECONDS FLAGS...: one `bench rank` run when RANK_PARTS names it
  local name=$1 secs=$2; shift 2
  [[ ",${RANK_PARTS:-flashmla,tp1,v31}," == *",$name,"* ]] || return 0
  local layers=(); [ -n "${RANK_LAYERS:-}" ] && [ "$name" != tp1 ] && layers=(--layers "$RANK_LAYERS")
  part "$name" "$secs" $DCPCTL bench rank --device cuda "$@" ${layers[@]+"${layers[@]}"} --out "$O/$name.json"
}

for SUITE in "$@"; do
  O=$OUT/$SUITE; mkdir -p "$O"
  { nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    grep -m1 "model name" /proc/cpuinfo; echo "cpus $(nproc)"
    git rev-parse --short HEAD 2>/dev/null; } > "$O/machine.txt" 2>&1
  case $SUITE in
    tests) part pytest 540 env DCPCTL_GPU_REPORT="$O" python3 -m pytest -q -p no:cacheprovider -m gpu tests ;;
    kernel) part bench_kernel 540 $DCPCTL bench kernel --no-naive --save-table "$O/attention.json" --format json ;;
    decode)
      part bench_decode 400 $DCPCTL bench decode --device cuda --tp-size 1 --dcp-sizes 1 --shape v3 --dtype bfloat16 \
        --batches 1,8,32,64 --contexts 8192,32768,131072 --page-size 64 --cuda-graphs -o "$O/decode.json"
      part bench_capacity 60 $DCPCTL bench capacity --format json ;;
    step)
      M=$(v3_checkpoint /tmp/dcpctl-v3-step)
      part fusion_ab 500 python3 -m benchmarks.fusion_ab --model "$M" --batches 1,8,32 -o "$O/fusion_ab.json" ;;
    serve)
      args=(--out "$O" --variants "${VARIANTS:-graph,eager}" --hf-modes "${HF_MODES-compiled,eager}"
            --budget-s "${BUDGET_S:-360}")
      [ -n "${CELLS:-}" ] && args+=(--cells "$CELLS")
      part serve_peers 580 python3 -m benchmarks.serve_peers "${args[@]}" ;;
    prefill) part prefill_ttft 300 python3 -m benchmarks.prefill_ttft "$O/prefill_ttft.json" ;;
    mixed)
      part serve_mixed 580 python3 -m benchmarks.serve_mixed --out "$O" --budget-s "${BUDGET_S:-480}" \
        --cells "${CELLS:-stall,moe,early,dense1k}" --stall-repeats "${STALL_REPEATS:-3}" \
        --stall-warmup "${STALL_WARMUP:-1}" ;;
    fp8serve)   # checkpoints (7.5 GB) and Triton caches go under /tmp, not into the results
      part fp8_serve 580 python3 -m benchmarks.fp8_serve --out "$O" --work /tmp/dcpctl-fp8-work --budget-s "${BUDGET_S:-470}"
      rm -rf /tmp/dcpctl-fp8-work ;;
    fp8)
      part tests 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/runtime/kernels/test_fp8_gemm.py \
        tests/runtime/models/test_model_fp8.py tests/runtime/models/test_weight_bytes.py
      part sweep 240 python3 -m benchmarks.fp8_gemm --sweep --modes w8a8 w8a16 --save-table "$O/fp8_gemm.json" \
        --json "$O/sweep.json"
      part model_check 100 python3 -m benchmarks.fp8_model_check --trained --json "$O/model_check.json" ;;
    fp8grouped)   # the shipped table of this GPU (its name, spaces as _) keeps its other sections
      T=dcpctl/tuning/fp8_gemm/device_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | tr ' ' _).json
      merge=(); [ -e "$T" ] && merge=(--merge-table "$T")
      part sweep 540 python3 -m benchmarks.fp8_gemm --modes w8a16 --grouped --experts 16 \
        --grouped-rows 2 4 8 16 24 32 48 64 --sweep --budget-s 400 --shapes ${merge[@]+"${merge[@]}"} \
        --save-table "$O/fp8_gemm.json" --json "$O/sweep.json" ;;
    gemm16) part sweep 500 python3 -m benchmarks.gemm16_sweep -o "$O/sweep.json" --save-table "$O/gemm16.json" ;;
    head_bmm) part sweep 300 python3 -m benchmarks.head_bmm_sweep -o "$O/sweep.json" --save-table "$O/head_bmm.json" ;;
    tiles) part bench_tiles 400 $DCPCTL bench tiles --save-table "$O/mla_tiles.json" ;;
    x2)
      part bench_decode 400 $DCPCTL bench decode --device cuda --tp-size 2 --dcp-sizes 1,2 --shape v3 \
        --dtype bfloat16 --batches 1,8,32,64 --contexts 8192,32768,131072 --page-size 64 --cuda-graphs \
        -o "$O/decode.json"
      part bench_exchange 150 $DCPCTL bench exchange --dcp-size 2 --batches 1,8,32,64 --format json ;;
    rank)
      GRID=(--batches 1,8,32,64 --contexts 8192,32768,131072 --hardware h200-8)
      [[ ",${RANK_PARTS:-flashmla,tp1,v31}," == *",flashmla,"* ]] && part flashmla 180 python3 -c \
        "from dcpctl.runtime.attention.flashmla_setup import main; raise SystemExit(main())"
      [[ ",${RANK_PARTS:-flashmla,tp1,v31}," == *",tp1,"* ]] && M=$(rank_checkpoint /tmp/dcpctl-rank-moe)
      rank_part tp1 100 --model-path "${M:-}" --weights checkpoint --tp-size 1 --routing uniform --batches 8,32 \
        --contexts 4096,16384 --max-running-requests 32
      rank_part v31 270 --model-preset deepseek-v3.1 --tp-size 8 --dcp-size 8 "${GRID[@]}"
      rank_part k2 270 --model-preset kimi-k2 --tp-size 16 --dcp-size 8 --nnodes 2 "${GRID[@]}"
      python3 -m benchmarks.rank_check "$O"/tp1.json "$O"/v31.json "$O"/k2.json
      echo "rank/check rc=$?" ;;
    *) echo "unknown suite $SUITE; suites: tests kernel decode step serve prefill mixed fp8serve fp8 fp8grouped gemm16 head_bmm tiles x2 rank"; exit 2 ;;
  esac
done
