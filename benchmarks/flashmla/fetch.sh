#!/usr/bin/env bash
# Put FlashMLA's source tree in .vendor/flashmla-<commit>.tar.gz for dcpctl/runtime/attention/flashmla_setup.py
# (FlashMLA publishes no release; the device has no network, so the caller carries .vendor there).
# The commit: 9c5dfab (2025-04-29, "update to cutlass 3.9"), the newest one whose tree is the dense SM90
# decode kernel only (csrc/flash_api.cpp + get_mla_metadata.cu, mla_combine.cu, splitkv_mla.cu: the
# 2025-04-22 performance update, ~660 TFLOP/s on H800); later commits move the same SM90 sources to
# csrc/sm90/ unchanged and add SM100 and sparse kernels we do not build.  Its cutlass submodule is not in
# the tarball: the build takes CUTLASS from FlashInfer's sdist (3rdparty/cutlass, CUTLASS 4.0).
# Source: a git snapshot of github.com/deepseek-ai/FlashMLA ($FLASHMLA_GIT, a bare git dir; default the
# mirror the session's fetch tool makes), or, with network, a fresh clone of it.
# usage: benchmarks/flashmla/fetch.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
COMMIT=9c5dfab6d1746b4a27af14f440e7afd5c01ece68
out=.vendor/flashmla-${COMMIT:0:7}.tar.gz
mkdir -p .vendor
if [ -f "$out" ] && tar -tzf "$out" "flashmla-${COMMIT:0:7}/csrc/flash_api.cpp" >/dev/null 2>&1; then
  echo "$out: present"; exit 0
fi
git_dir=${FLASHMLA_GIT:-/work/.mirror/deepseek-ai+FlashMLA/repo}
if ! git --git-dir="$git_dir" cat-file -e "$COMMIT^{commit}" 2>/dev/null; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  git clone --bare --quiet https://github.com/deepseek-ai/FlashMLA.git "$tmp/repo"
  git_dir=$tmp/repo
fi
git --git-dir="$git_dir" archive --format=tar.gz --prefix="flashmla-${COMMIT:0:7}/" -o "$out.part" "$COMMIT"
mv "$out.part" "$out"; echo "$out: written from $git_dir at $COMMIT"
