#!/usr/bin/env bash
# Put FlashInfer 0.2.14's source release (and `packaging`, which its JIT imports) in .vendor/ for
# benchmarks/flashinfer_mla.py; the device has no network, so the caller carries .vendor there.
# Checks each file's sha256 (as downloaded from PyPI on 2026-11-29); an existing file with the right hash is kept.
# usage: benchmarks/flashinfer/fetch.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .vendor
get() {  # file, sha256, url
  local f=.vendor/$1
  if [ -f "$f" ] && echo "$2  $f" | sha256sum -c --quiet - 2>/dev/null; then echo "$f: present"; return; fi
  curl -fsSL -o "$f.part" "$3"
  echo "$2  $f.part" | sha256sum -c --quiet - || { echo "$f: sha256 mismatch" >&2; rm -f "$f.part"; exit 1; }
  mv "$f.part" "$f"; echo "$f: fetched"
}
get flashinfer_python-0.2.14.tar.gz 24e09a14fef47dd1c28da37ba05438915f269f9687a0e89dda2047eb9812f882 \
  https://files.pythonhosted.org/packages/ed/26/d1eac56b37d225cb3f84495bd897829dece21f62463487f3c1d9cafe78a0/flashinfer_python-0.2.14.tar.gz
get packaging-25.0-py3-none-any.whl 29572ef2b1f17581046b3a2227d5c611fb25ec70ca1ba8554b24b0e69331a484 \
  https://files.pythonhosted.org/packages/20/12/38679034af332785aac8774540895e234f4d07f7545804097de4b666afd8/packaging-25.0-py3-none-any.whl
