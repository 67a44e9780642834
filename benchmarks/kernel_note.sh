#!/usr/bin/env bash
# The runtime's printed local-attention choice, end to end through `dcpctl generate` on this machine's
# first GPU: a DeepSeek-V3 attention shape (128 heads, kv_lora 512, rope 64; 2 small layers, random
# weights) and the built-in tiny model (latent row 32 + 8).  Prints the `dcpctl:` lines and the outputs.
# usage: benchmarks/kernel_note.sh [DIR]     (DIR: where the model is written; default /tmp/dcpctl-v3attn)
# Needs dcpctl installed (pip install -e .); from a bare checkout on PYTHONPATH, `ln -s ../presets dcpctl/presets`
# first (pyproject maps presets/ to dcpctl.presets).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/dcpctl-v3attn}
python3 - "$DIR" <<'PY'
import sys
from dcpctl.runtime.tiny import write_tiny_model
write_tiny_model(sys.argv[1], num_attention_heads=128, num_key_value_heads=128, kv_lora_rank=512, qk_rope_head_dim=64,
                 qk_nope_head_dim=128, v_head_dim=128, q_lora_rank=64, hidden_size=256, num_hidden_layers=2)
PY
gen() { python3 -m dcpctl.cli.main generate --device cuda --dtype bfloat16 --prompt Hello --max-new-tokens 4 "$@"; }
echo "== V3 attention shape, TP 1"; gen --model-path "$DIR" --tp-size 1 --dcp-size 1 2>&1
echo "== tiny model, TP 1"; gen --tp-size 1 --dcp-size 1 2>&1
