#!/usr/bin/env bash
# Create a CPU-only vLLM 0.34.0 environment that can run vLLM's config construction and attention selection
# (benchmarks/vllm/vllm_grid_worker.py, tests/export/test_export_vllm_accepted.py). No GPU, no CUDA, no kernels:
# vllm is installed without its dependencies, then only the pure-Python packages its config-time import path
# needs; its CUDA extensions are replaced by import-only stand-ins at run time (benchmarks/vllm/vllm_cpu.py).
#
#   bash benchmarks/vllm/setup_venv.sh [VENV_DIR]        # default /tmp/vllmvenv
#   VLLM_PYTHON=VENV_DIR/bin/python python -m benchmarks.vllm.vllm_grid
#
# Environment: PYTHON (default python3.11). vLLM 0.34.0 pins torch 2.14.0; torch 2.13.0 (CPU) is used here,
# which its config code runs on (no compiled vLLM op is called).
set -euo pipefail
V=${1:-/tmp/vllmvenv}
PY=${PYTHON:-python3.11}
rm -rf "$V"
"$PY" -m venv "$V"
"$V/bin/pip" install -q torch==2.13.0
"$V/bin/pip" install -q --no-deps vllm==0.34.0
PIN=$(mktemp); echo "torch==2.13.0" > "$PIN"
"$V/bin/pip" install -q -c "$PIN" packaging "transformers>=5.16.1,<5.23.0" pydantic regex cachetools psutil numpy \
  requests tqdm blake3 py-cpuinfo huggingface_hub tokenizers safetensors protobuf pyyaml einops cloudpickle msgspec \
  pyzmq pybase64 cbor2 ijson setproctitle prometheus_client fastapi openai pillow partial-json-parser jsonschema \
  filelock typing_extensions sentencepiece tiktoken aiohttp uvloop llguidance xgrammar loguru oss-harmony
rm -f "$PIN"
"$V/bin/pip" install -q --no-deps compressed-tensors==0.17.0   # its own requirements would replace torch
"$V/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
