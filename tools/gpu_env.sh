#!/usr/bin/env bash
# The GPU machine's environment for dcpctl. That machine has torch, Triton, transformers and CUDA's compiler but no
# network, so what else dcpctl needs travels from here: Python wheels in .whl/, sources in .vendor/.
#
#   bash tools/gpu_env.sh prepare        here (with network), from anywhere in the checkout: the cp312 manylinux
#                                        wheels below into .whl/; FlashInfer 0.2.14's sdist, the `packaging` wheel its
#                                        JIT imports, and FlashMLA's tree with its pinned CUTLASS headers into .vendor/
#   . tools/gpu_env.sh setup [--no-build]  there, sourced: NVLink multicast off, the wheels
#                                        installed under /tmp/site, PYTHONPATH, the source variables the runtime
#                                        reads, and FlashMLA built now (log: /tmp/dcpctl-flashmla-build.log)
#   bash tools/gpu_env.sh check          there, after setup: which modules dcpctl and its tests import are missing
#
# The device call carries `.whl` and `.vendor` (about 20 MiB with the tree under 64 MiB) and starts with
#   . tools/gpu_env.sh setup &&
# benchmarks/gpu.sh sources it itself.
#
# FlashMLA: 9c5dfab (2025-04-29, "update to cutlass 3.9"), the newest commit whose tree is the dense SM90 decode
# kernel only (csrc/flash_api.cpp + get_mla_metadata.cu, mla_combine.cu, splitkv_mla.cu); later commits move the
# same sources to csrc/sm90/ and add SM100 and sparse kernels we do not build. It publishes no release, so its tree
# comes from git: $FLASHMLA_GIT and $CUTLASS_GIT (bare git dirs; default the mirrors the session's fetch tool
# makes), else fresh clones. CUTLASS: the commit FlashMLA pins as csrc/cutlass (e94e888, 3.9), include/ only, at
# csrc/cutlass/include as its setup.py expects (with FlashInfer's CUTLASS 4.0 instead, nvcc 13.0 compiles
# splitkv_mla.cu to 255 registers and 506 bytes of spill stores; with e94e888 to 239 and none, `ptxas -v`).
# dcpctl/runtime/attention/flashmla_setup.py builds it; flashinfer_setup.py makes the sdist importable.

# The wheels: what dcpctl's dependencies and its test extra need beyond the GPU image (torch, numpy, safetensors,
# transformers, tokenizers, huggingface_hub, pyyaml, packaging), with their own needs, at the versions
# `pip install -e '.[test]'` resolves here.
WHEELS=(click==8.5.1 rich==15.0.0 markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.21.0
        fastapi==0.165.0 annotated-doc==0.0.7 opentelemetry-api==1.45.3 starlette==1.10.0 pydantic==2.14.4
        pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0
        uvicorn==0.55.0 h11==0.16.0 httptools==0.9.0 uvloop==0.23.0 prometheus-client==0.26.0
        openai==3.63.0 jiter==0.19.0 httpx2==2.17.0 httpcore2==2.17.0 truststore==0.10.5
        httpx==0.29.0 httpcore==1.0.9 anyio==4.16.0 sniffio==1.3.1 idna==3.21 certifi==2026.10.19.post1
        pytest==9.2.0 iniconfig==2.3.1 pluggy==1.7.0 hypothesis==6.170.27 sortedcontainers==2.4.0
        nvidia-ml-py==13.615.71 llguidance==1.9.1)
FLASHINFER=flashinfer-python==0.2.14
FLASHINFER_SHA256=24e09a14fef47dd1c28da37ba05438915f269f9687a0e89dda2047eb9812f882
PACKAGING=packaging==25.0
FLASHMLA_COMMIT=9c5dfab6d1746b4a27af14f440e7afd5c01ece68
CUTLASS_COMMIT=e94e888df3551224738bfa505787b515eae8352f
# Modules `check` imports: the runtime's, the server's, the tests'
MODULES=(torch triton transformers safetensors numpy yaml click rich fastapi uvicorn httptools uvloop
         prometheus_client pydantic llguidance openai httpx pytest hypothesis pynvml)

_platforms() {
  local n
  for n in 31 28 27 24 17; do printf -- '--platform manylinux_2_%s_x86_64 ' "$n"; done
  printf -- '--platform manylinux2014_x86_64 --platform manylinux1_x86_64'
}

_wheels() {   # cp312 wheels for the GPU machine, one version each
  mkdir -p .whl
  # shellcheck disable=SC2046
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    $(_platforms) -d .whl "${WHEELS[@]}" || return 1
  echo ".whl: $(ls .whl/*.whl | wc -l) wheels, $(du -sh .whl | cut -f1)"
}

_flashinfer() {   # FlashInfer's sdist (its metadata step imports torch: the checkout's venv has it) and `packaging`
  local f=.vendor/flashinfer_python-0.2.14.tar.gz py=python3
  [ -x .venv/bin/python ] && py=.venv/bin/python
  mkdir -p .vendor
  if ! { [ -f "$f" ] && echo "$FLASHINFER_SHA256  $f" | sha256sum -c --quiet - 2>/dev/null; }; then
    "$py" -m pip download -q --no-deps --no-binary=:all: --no-build-isolation -d .vendor "$FLASHINFER" || return 1
    echo "$FLASHINFER_SHA256  $f" | sha256sum -c --quiet - || { echo "$f: sha256 mismatch" >&2; return 1; }
  fi
  python3 -m pip download -q --no-deps --only-binary=:all: -d .vendor "$PACKAGING" || return 1
  echo "$f: present"
}

_git_dir() {   # NAME GIT_DIR URL SHA -> a git dir holding SHA
  if git --git-dir="$2" cat-file -e "$4^{commit}" 2>/dev/null; then echo "$2"; return; fi
  git clone --bare --quiet "$3" "$TMP/$1" && echo "$TMP/$1"
}

_flashmla() {   # FlashMLA's tree with its pinned CUTLASS's include/ in one tarball
  local top=flashmla-${FLASHMLA_COMMIT:0:7}-cutlass-${CUTLASS_COMMIT:0:7} mla cut pinned
  local out=.vendor/$top.tar.gz
  mkdir -p .vendor
  if [ -f "$out" ] && tar -tzf "$out" "$top/csrc/cutlass/include/cutlass/cutlass.h" > /dev/null 2>&1; then
    echo "$out: present"; return
  fi
  TMP=$(mktemp -d)
  mla=$(_git_dir flashmla "${FLASHMLA_GIT:-/work/.mirror/deepseek-ai+FlashMLA/repo}" \
        https://github.com/deepseek-ai/FlashMLA.git "$FLASHMLA_COMMIT") &&
  cut=$(_git_dir cutlass "${CUTLASS_GIT:-/work/.mirror/NVIDIA+cutlass/repo}" \
        https://github.com/NVIDIA/cutlass.git "$CUTLASS_COMMIT") || { rm -rf "$TMP"; return 1; }
  pinned=$(git --git-dir="$mla" ls-tree "$FLASHMLA_COMMIT" csrc/cutlass | awk '{print $3}')
  if [ "$pinned" != "$CUTLASS_COMMIT" ]; then
    echo "FlashMLA $FLASHMLA_COMMIT pins CUTLASS $pinned, not $CUTLASS_COMMIT" >&2; rm -rf "$TMP"; return 1
  fi
  mkdir -p "$TMP/t/$top/csrc/cutlass"
  # a snapshot mirror may lack large blobs outside include/ (CUTLASS's media/): git names them on stderr and still
  # writes every file asked for, which the member check below confirms
  if ! { git --git-dir="$mla" archive "$FLASHMLA_COMMIT" | tar -x -C "$TMP/t/$top" &&
         git --git-dir="$cut" archive "$CUTLASS_COMMIT" include 2> "$TMP/archive.err" |
           tar -x -C "$TMP/t/$top/csrc/cutlass" &&
         [ -f "$TMP/t/$top/csrc/cutlass/include/cutlass/cutlass.h" ] &&
         tar -czf "$out.part" -C "$TMP/t" "$top" && mv "$out.part" "$out"; }; then
    cat "$TMP/archive.err" >&2; rm -rf "$TMP" "$out.part"; return 1
  fi
  rm -rf "$TMP"
  echo "$out: written from $mla with CUTLASS $CUTLASS_COMMIT's include/ from $cut"
}

prepare() {
  _wheels && _flashinfer && _flashmla || return 1
  echo "carry: .whl .vendor ($(du -sch .whl .vendor | tail -1 | cut -f1) beside the tree's" \
       "$(git ls-files -z | xargs -0 du -cb | tail -1 | awk '{printf "%.1f MiB", $1 / 1048576}'))"
}

setup() {   # sourced: the caller's shell keeps the environment; paths from the checkout's root, wherever it is
  local build=1 root fi_sdist mla_sdist
  [ "${1:-}" = "--no-build" ] && build=0
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || return 1
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1   # NVLink multicast off
  export PYTHONUNBUFFERED=1 DCPCTL_CACHE=${DCPCTL_CACHE:-/tmp/dcpctl-cache}
  export PYTHONPATH=$root
  if ls "$root"/.whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "$root"/.whl/*.whl || return 1
    export PYTHONPATH=/tmp/site:$root
  fi
  fi_sdist=$(ls "$root"/.vendor/flashinfer_python-*.tar.gz 2> /dev/null | head -1)
  mla_sdist=$(ls "$root"/.vendor/flashmla-*-cutlass-*.tar.gz 2> /dev/null | head -1)
  [ -n "$fi_sdist" ] && export DCPCTL_FLASHINFER_SDIST=$fi_sdist
  [ -n "$mla_sdist" ] && export DCPCTL_FLASHMLA_SDIST=$mla_sdist
  if [ "$build" = 1 ] && [ -n "$mla_sdist" ] && command -v nvidia-smi > /dev/null; then
    python3 -c "from dcpctl.runtime.attention.flashmla_setup import main; raise SystemExit(main())" \
      > /tmp/dcpctl-flashmla-build.log 2>&1
    echo "FlashMLA build rc=$? ($(tail -1 /tmp/dcpctl-flashmla-build.log))"
  fi
  return 0
}

check() {
  python3 - "${MODULES[@]}" <<'EOF'
import importlib, sys
missing = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as e:    # an import that fails for any reason is missing here
        missing.append(f"{name} ({type(e).__name__}: {e})")
print("missing: " + "; ".join(missing) if missing else f"all {len(sys.argv) - 1} modules import")
sys.exit(1 if missing else 0)
EOF
}

_usage() { echo "usage: tools/gpu_env.sh prepare | . tools/gpu_env.sh setup [--no-build] | tools/gpu_env.sh check" >&2; }

if [ "${BASH_SOURCE[0]}" != "$0" ]; then    # sourced: setup only, from the repository root
  if [ "${1:-}" = setup ]; then shift; setup "$@"; else _usage; false; fi
else
  set -uo pipefail
  cd "$(dirname "$0")/.." || exit 2
  case "${1:-}" in
    prepare) prepare ;;
    setup) echo "setup sets the caller's environment: source it (. tools/gpu_env.sh setup)" >&2; exit 2 ;;
    check) check ;;
    *) _usage; exit 2 ;;
  esac
fi
