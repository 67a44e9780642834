#!/usr/bin/env bash
# Create a CPU-only SGLang 0.5.23 environment that can run SGLang's argument resolution
# (prepare_server_args + resolve_once) for benchmarks/sglang/check_exports.py. No GPU, no CUDA, no kernels:
# sglang is installed without its dependencies, then only the pure-Python packages its config-time import
# path needs, plus an import-only torchvision stub generated below.
#
#   bash benchmarks/sglang/setup_venv.sh [VENV_DIR]        # default /tmp/sglvenv-clean
#   SGLANG_PYTHON=VENV_DIR/bin/python python -m benchmarks.sglang.check_exports
#
# Environment: PYTHON (default python3.11; SGLang 0.5.23 was checked on CPython 3.11),
# TORCH_INDEX_URL (optional, e.g. https://download.pytorch.org/whl/cpu for the lean CPU build 2.13.0+cpu
# the recorded run used; the default PyPI wheel also works but pulls the CUDA libraries).
set -euo pipefail
V=${1:-/tmp/sglvenv-clean}
PY=${PYTHON:-python3.11}
T0=$(date +%s)
rm -rf "$V"
"$PY" -m venv "$V"
"$V/bin/pip" install -q --upgrade pip

# 1. torch first, pinned, so nothing later drags in another version
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  "$V/bin/pip" install -q torch==2.13.0 --index-url "$TORCH_INDEX_URL"
else
  "$V/bin/pip" install -q torch==2.13.0
fi
T1=$(date +%s); echo "torch: $((T1 - T0))s"

# 2. sglang itself without its dependency tree (sgl-kernel, flashinfer, CUDA wheels, ...)
"$V/bin/pip" install -q --no-deps sglang==0.5.23

# 3. the pure-Python dependencies its import + resolution path needs (torch held at the pin)
PIN=$(mktemp); echo "torch==2.13.0" > "$PIN"
"$V/bin/pip" install -q -c "$PIN" \
  numpy orjson psutil pybase64 requests packaging pillow starlette msgspec pydantic pyzmq tqdm IPython \
  aiohttp transformers dill apache-tvm-ffi sentencepiece loguru gguf triton openai partial_json_parser einops
rm -f "$PIN"
# compressed-tensors' own requirements would replace torch/transformers: install it alone
"$V/bin/pip" install -q --no-deps compressed-tensors

# 4. import-only torchvision stub: SGLang's multimodal modules import torchvision at import time; resolution
#    never calls it, and a real torchvision would have to match torch exactly. Every entry point raises.
SP=$("$V/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
mkdir -p "$SP/torchvision/transforms/v2"
cat > "$SP/torchvision/__init__.py" <<'PYEOF'
"""Import-only stub of torchvision for CPU-only config resolution (no image ops)."""
__version__ = "0.0.0+stub"
PYEOF
cat > "$SP/torchvision/io.py" <<'PYEOF'
import enum


class ImageReadMode(enum.Enum):
    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4


def decode_image(*a, **k):
    raise RuntimeError("torchvision stub: image ops are unavailable")
PYEOF
cat > "$SP/torchvision/transforms/__init__.py" <<'PYEOF'
from torchvision.transforms.functional import InterpolationMode  # noqa: F401
from torchvision.transforms import functional  # noqa: F401


def _unavailable(*a, **k):
    raise RuntimeError("torchvision stub: image transforms are unavailable")


Compose = Lambda = Resize = ToTensor = Normalize = CenterCrop = _unavailable
PYEOF
cat > "$SP/torchvision/transforms/functional.py" <<'PYEOF'
import enum


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def pil_to_tensor(*a, **k):
    raise RuntimeError("torchvision stub: image ops are unavailable")
PYEOF
cat > "$SP/torchvision/transforms/v2/__init__.py" <<'PYEOF'
from torchvision.transforms.v2 import functional  # noqa: F401
PYEOF
cat > "$SP/torchvision/transforms/v2/functional.py" <<'PYEOF'
from torchvision.transforms.functional import InterpolationMode, pil_to_tensor  # noqa: F401
PYEOF

T2=$(date +%s); echo "deps: $((T2 - T1))s, total $((T2 - T0))s"
"$V/bin/python" -c "import torch, sglang; from sglang.srt.server_args import prepare_server_args; print('torch', torch.__version__, 'sglang', sglang.__version__, 'ok')"
