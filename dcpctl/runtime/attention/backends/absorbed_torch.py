"""The absorbed kind's torch reference: exact on any device and dtype, over the same block table.

It runs where no kernel can (a CPU pool, float64, a latent row too wide for ours) and for --attention-backend
torch_native (plan/attention_names.py), and says once why.
"""
from __future__ import annotations

from dcpctl.plan.attention_names import REFERENCE
from dcpctl.runtime.attention.backends.absorbed_triton import blocker as triton_blocker, launch
from dcpctl.runtime.attention.backends.base import Absorbed, Call, register
from dcpctl.runtime.attention.triton_mla import MLAOut, mla_decode_reference
from dcpctl.runtime.notes import note_once


class Reference(Absorbed):
    name, label, reference = REFERENCE, "the torch reference", True

    def run(self, call: Call, state: None) -> MLAOut:
        note_once(f"local attention: the torch reference over the block table (attention_path paged; "
                  f"{triton_blocker(call.q, call.pool, call.v_dim) or 'asked for'})")
        return launch(mla_decode_reference, call)


BACKEND = register(Reference())
