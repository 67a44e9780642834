#!/usr/bin/env bash
# Put FlashMLA's source tree, with its CUTLASS submodule's headers, in .vendor/flashmla-<commit>-cutlass-<commit>.tar.gz
# for dcpctl/runtime/attention/flashmla_setup.py (FlashMLA publishes no release; the device has no network, so the
# caller carries .vendor there).
# FlashMLA: 9c5dfab (2025-04-29, "update to cutlass 3.9"), the newest commit whose tree is the dense SM90 decode
# kernel only (csrc/flash_api.cpp + get_mla_metadata.cu, mla_combine.cu, splitkv_mla.cu: the 2025-04-22 performance
# update, ~660 TFLOP/s on H800); later commits move the same SM90 sources to csrc/sm90/ and add SM100 and sparse
# kernels we do not build.
# CUTLASS: the commit FlashMLA's tree pins as csrc/cutlass (e94e888, 3.9), its include/ only, at csrc/cutlass/include
# as FlashMLA's setup.py expects. Not CUTLASS 4.0 (FlashInfer 0.2.14's 3rdparty/cutlass, which the build used
# before): with it nvcc 13.0 compiles splitkv_mla.cu to 255 registers and 506 bytes of spill stores, with e94e888
# to 239 registers and no spills (same flags, `ptxas -v`).
# Sources: git snapshots ($FLASHMLA_GIT, $CUTLASS_GIT: bare git dirs; default the mirrors the session's fetch tool
# makes), or, with network, fresh clones.
# usage: benchmarks/flashmla/fetch.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
COMMIT=9c5dfab6d1746b4a27af14f440e7afd5c01ece68
CUTLASS=e94e888df3551224738bfa505787b515eae8352f
top=flashmla-${COMMIT:0:7}-cutlass-${CUTLASS:0:7}
out=.vendor/$top.tar.gz
mkdir -p .vendor
if [ -f "$out" ] && tar -tzf "$out" "$top/csrc/cutlass/include/cutlass/cutlass.h" >/dev/null 2>&1; then
  echo "$out: present"; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
repo() {  # repo() NAME GIT_DIR URL SHA -> a git dir holding SHA
  if git --git-dir="$2" cat-file -e "$4^{commit}" 2>/dev/null; then echo "$2"; return; fi
  git clone --bare --quiet "$3" "$tmp/$1" && echo "$tmp/$1"
}
mla=$(repo flashmla "${FLASHMLA_GIT:-/work/.mirror/deepseek-ai+FlashMLA/repo}" https://github.com/deepseek-ai/FlashMLA.git "$COMMIT")
cut=$(repo cutlass "${CUTLASS_GIT:-/work/.mirror/NVIDIA+cutlass/repo}" https://github.com/NVIDIA/cutlass.git "$CUTLASS")
pinned=$(git --git-dir="$mla" ls-tree "$COMMIT" csrc/cutlass | awk '{print $3}')
[ "$pinned" = "$CUTLASS" ] || { echo "FlashMLA $COMMIT pins CUTLASS $pinned, not $CUTLASS" >&2; exit 1; }
mkdir -p "$tmp/t/$top/csrc/cutlass"
git --git-dir="$mla" archive "$COMMIT" | tar -x -C "$tmp/t/$top"
git --git-dir="$cut" archive "$CUTLASS" include | tar -x -C "$tmp/t/$top/csrc/cutlass"
tar -czf "$out.part" -C "$tmp/t" "$top"
mv "$out.part" "$out"; echo "$out: written from $mla at $COMMIT with CUTLASS $CUTLASS's include/ from $cut"
