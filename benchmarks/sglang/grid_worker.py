#!/usr/bin/env python3
"""SGLang side of benchmarks/sglang/grid.py: resolve many `sglang serve` argv lists in one process.

Runs in the SGLang 0.5.23 venv (benchmarks/sglang/setup_venv.sh), never in dcpctl's. One process per
emulated platform: `grid_worker.py SM MNNVL [full]` reads one JSON argv list per stdin line and writes one
JSON result per line to stdout. Per argv: `prepare_server_args(argv)` + `resolve_once()` +
`check_server_args()` (the last is what SGLang runs at engine startup), each on a fresh record.

Platform emulation: `sglang.srt.runtime_context.override_platform(...)` with the facts of an SM90
(H100/H200), SM100 (B200/GB200) or SM103 (B300/GB300) CUDA device. MNNVL: SGLang asks torch for the
device name (`utils/common.py` `is_mnnvl_fabric_device`: GB200/GB300 by name, else NVML fabric);
with MNNVL=1 that function is replaced by one returning True, in every module that imported it.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import time
import traceback
import warnings

FIELDS = ("device", "tp_size", "dp_size", "attn_dp_size", "enable_dp_attention", "dcp_size",
          "dcp_comm_backend", "dcp_replicate_q_proj", "ep_size", "pp_size", "nnodes", "page_size",
          "kv_cache_dtype", "attention_backend", "decode_attention_backend", "prefill_attention_backend",
          "enable_symm_mem", "disaggregation_mode", "context_length", "speculative_algorithm",
          "speculative_num_draft_tokens", "speculative_num_steps", "speculative_eagle_topk",
          "enable_hierarchical_cache", "hicache_storage_backend")


def platform_facts(sm: int) -> dict:
    facts = dict(is_cuda=True, is_hip=False, is_npu=False, is_xpu=False, is_musa=False, is_mps=False,
                 has_amx=False, has_flashinfer=False, is_sm120=False, is_sm110=False, device_sm=sm,
                 device_capability=(sm // 10, sm % 10))
    blackwell = sm // 10 == 10
    facts.update(is_sm90=sm == 90, is_sm100=blackwell, is_sm100_or_sm110=blackwell, is_blackwell=blackwell,
                 is_hopper_with_cuda_12_3=sm == 90)
    return facts


def install(sm: int, mnnvl: bool) -> None:
    from sglang.srt.runtime_context import override_platform
    override_platform(**platform_facts(sm)).install()
    if mnnvl:
        import sglang.srt.arg_groups.serving_hook  # noqa: F401 - imports the name; patched below
        import sglang.srt.server_args  # noqa: F401
        import sglang.srt.utils.common as common
        common.is_mnnvl_fabric_device = lambda: True
        for name, mod in list(sys.modules.items()):
            if name.startswith("sglang.") and getattr(mod, "is_mnnvl_fabric_device", None) is not None:
                mod.is_mnnvl_fabric_device = common.is_mnnvl_fabric_device


def resolve(argv: list[str], full: bool = False) -> dict:
    from sglang.srt.server_args import prepare_server_args
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            sa = prepare_server_args(argv)
            sa.resolve_once()
            sa.check_server_args()
        d = sa.resolved_dict()
        return {"accepted": True, "resolved": d if full else {k: d.get(k) for k in FIELDS}}
    except SystemExit as e:  # argparse prints its error to stderr, then exits 2
        lines = [x for x in err.getvalue().splitlines() if "error:" in x]
        return {"accepted": False, "error": f"argparse exit {e.code}: " + (lines[-1] if lines else "")}
    except BaseException as e:  # noqa: BLE001 - every rejection is a result
        return {"accepted": False, "error": f"{type(e).__name__}: {str(e)[:600]}", "at": _where(e)}


def _where(e: BaseException) -> str:
    """The SGLang source line that raised (for docs/plan.md citations), relative to site-packages."""
    tb = traceback.extract_tb(e.__traceback__)
    frames = [f for f in tb if "/sglang/" in f.filename] or tb
    f = frames[-1]
    return f"{f.filename.split('site-packages/')[-1]}:{f.lineno} ({f.name})"


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    install(int(sys.argv[1]), sys.argv[2] == "1")
    full = sys.argv[3:] == ["full"]  # every resolved field (check_pasted.py), not only FIELDS
    for line in sys.stdin:
        if not line.strip():
            continue
        t0 = time.time()
        out = resolve(json.loads(line), full)
        out["seconds"] = round(time.time() - t0, 3)
        sys.stdout.write(json.dumps(out, default=str) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
