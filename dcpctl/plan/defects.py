"""Known engine defects as data: combinations an engine starts but runs wrong or slow, named before they bite.

Each entry is checked against the engine's code at the release dcpctl models (the `source`) or its thread;
`dcpctl plan` shows every one a plan meets as a warning with the thread and the workaround, and lists them
in the JSON (`defects`). A defect is never a refusal: what an engine refuses is a violation of its rules.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from dcpctl.plan.decisions import Decision
from dcpctl.plan.request import PlanRequest

When = Callable[[PlanRequest, dict[str, Decision]], bool]


@dataclass(frozen=True)
class Defect:
    engine: str        # an engine target's name
    versions: str      # the releases it is known in
    combination: str   # what triggers it
    effect: str
    thread: str        # the issue or pull request that names it
    workaround: str
    source: str        # where the release's code shows it
    when: When

    def warning(self) -> str:
        return f"known {self.engine} defect ({self.thread}): {self.combination}: {self.effect}; {self.workaround}"

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("engine", "versions", "combination", "effect", "thread", "workaround",
                                              "source")}


# vLLM MLA backends whose metadata builders declare no DCP varlen decode (supports_dcp_with_varlen): under DCP,
# v1/attention/backend.py _init_reorder_batch_threshold forces their reorder threshold back to 1
NO_DCP_VARLEN = ("FLASHMLA", "CUTLASS_MLA", "TRITON_MLA")


def _vllm_mtp_full_graphs(req: PlanRequest, d: dict[str, Decision]) -> bool:
    from dcpctl.plan.vllm_settings import full_cuda_graphs, read, speculates
    s = read(req.engine_args)
    be, interleave = d["decode_attention_backend"].value, d["cp_kv_cache_interleave_size"].value
    no_varlen = be in NO_DCP_VARLEN or (be == "FLASH_ATTN_MLA" and interleave != 1)
    return req.topology.dcp_size > 1 and speculates(s) and full_cuda_graphs(s) and no_varlen


DEFECTS: tuple[Defect, ...] = (
    Defect("vllm", "0.22.1 to 0.34.0 (issue open)",
           "MTP speculative decoding + DCP under the default FULL_AND_PIECEWISE CUDA graphs, with an attention "
           "backend without DCP varlen decode (FLASHMLA, CUTLASS_MLA, TRITON_MLA; FLASH_ATTN_MLA at interleave != 1)",
           "silently corrupted output (truncated or repeating generations), no error",
           "https://github.com/vllm-project/vllm/issues/45425",
           "pass --compilation-config '{\"cudagraph_mode\": \"PIECEWISE\"}' (or --enforce-eager), or pick "
           "FLASH_ATTN_MLA at interleave 1 (SM90) / FLASHINFER_MLA (SM100)",
           "v1/attention/backend.py _init_reorder_batch_threshold; the MLA builders' supports_dcp_with_varlen",
           _vllm_mtp_full_graphs),
    Defect("sglang", "0.5.23", "DCP (dcp_size > 1)",
           "prefill runs without CUDA graphs (SGLang turns its breakable prefill graph off), which costs TTFT",
           "https://github.com/sgl-project/sglang/pull/31532",
           "none in 0.5.23 (sgl-project/sglang#38943 adds DCP prefill graphs); with PD disaggregation, a prefill "
           "side without DCP keeps its graphs",
           "srt/arg_groups/cuda_graph_hook.py disable_breakable_cudagraph_if_incompatible",
           lambda req, d: req.topology.dcp_size > 1),
)


def met(engine: str, req: PlanRequest, decisions: dict[str, Decision]) -> list[Defect]:
    """The known defects of `engine` this plan meets."""
    return [x for x in DEFECTS if x.engine == engine and x.when(req, decisions)]
