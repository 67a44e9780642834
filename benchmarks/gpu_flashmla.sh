#!/usr/bin/env bash
[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets; export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# One device call (one H200; carry .vendor, which benchmarks/flashmla/fetch.sh and flashinfer/fetch.sh fill):
# FlashMLA as the runtime's third local attention backend (issue 18).
#   1. build: FlashMLA's dense decode compiled from .vendor/flashmla-9c5dfab-cutlass-e94e888.tar.gz against its
#      pinned CUTLASS (timed), and FlashInfer's MLA module JIT-built, side by side;
#   2. GPU tests: every backend through the DCP merge = unsplit attention (DCP 1/2/4), greedy ids across backends;
#      then what FlashMLA returns for a zero-length row (a probe in its own process, 60 s at most);
#   3. `dcpctl bench kernel`: ours, FlashInfer and FlashMLA side by side, 128 heads first, contexts 1K-128K ($CONTEXTS),
#      the tables saved;
#   4. a summary: the automatic choice (shipped table and this run's) against the best per cell, and the best
#      backend's roofline fraction in the B x ctx >= 512K cells per head count.
# Every part runs; each one's exit status and seconds go to $OUT/i18m/status.txt.
# usage: OUT=dir bash benchmarks/gpu_flashmla.sh
# BEFORE carrying .vendor: on the host run benchmarks/flashmla/fetch.sh (it writes
# .vendor/flashmla-9c5dfab-cutlass-e94e888.tar.gz from the FlashMLA and CUTLASS mirrors; the device has no network) and benchmarks/flashinfer/fetch.sh (or copy main's .vendor).
set -u
cd "$(dirname "$0")/.."
O=${OUT:-/tmp/dcpctl-gpu}/i18m
mkdir -p "$O"
export PYTHONUNBUFFERED=1 DCPCTL_GPU_REPORT=$O
export DCPCTL_FLASHINFER_SDIST=$PWD/.vendor/flashinfer_python-0.2.14.tar.gz DCPCTL_FLASHINFER_WORK=/tmp/dcpctl-flashinfer
export DCPCTL_FLASHMLA_SDIST=$PWD/.vendor/flashmla-9c5dfab-cutlass-e94e888.tar.gz DCPCTL_FLASHMLA_WORK=/tmp/dcpctl-flashmla
: > "$O/status.txt"
. benchmarks/gpu_part.sh
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" \
  | tee "$O/versions.txt"
ls -la .vendor | tee -a "$O/versions.txt"
[ -f "$DCPCTL_FLASHMLA_SDIST" ] || echo "MISSING $DCPCTL_FLASHMLA_SDIST: run benchmarks/flashmla/fetch.sh on the host \
before carrying .vendor (FlashMLA is then not built or timed)" | tee -a "$O/status.txt"
(which ninja; nvcc --version | tail -2; nproc) >> "$O/versions.txt" 2>&1
# the two builds at once (16 cores): FlashMLA's 4 files, FlashInfer's fa3 MLA module
part build_flashmla 300 python3 benchmarks/flashmla/build.py &
part jit_flashinfer 200 python3 benchmarks/flashinfer/jit.py
wait
# a failed build is not retried by every later process (each would spend minutes): FlashMLA is then "not built"
grep -q "^build_flashmla rc=0 " "$O/status.txt" || { unset DCPCTL_FLASHMLA_SDIST; echo "FlashMLA build failed: not timed" | tee -a "$O/status.txt"; }
part tests 240 python3 -m pytest -q -p no:cacheprovider -rfEs tests/runtime/test_gpu_backends.py tests/runtime/test_gpu_flashmla.py
part zero_len_probe 60 python3 benchmarks/flashmla/zero_len_probe.py "$O/flashmla_zero_len.json"
bench() {  # name, heads: all backends side by side, its table saved
  part "bench_$1" 240 bash -c 'python3 -m dcpctl.cli.main bench kernel --no-naive --heads "$1" \
    --contexts "${CONTEXTS:-1K,2K,4K,8K,32K,64K,128K}" --batches 1,8,32,64 --save-table "$0/table_$2.json" --format json > "$0/kernel_$2.json"' \
    "$O" "$2" "$1"
}
bench h128 128
bench h16_64 16,64
part summary 60 python3 benchmarks/flashmla_summary.py "$O"
cat "$O/status.txt"
