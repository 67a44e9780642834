"""The case grid of benchmarks/sglang/grid.py: plan options, and the same options as `sglang serve` argv.

A case is a dict of dcpctl plan options (the keys of `dcpctl.cli.options.PLAN_KEYS`, plus `model`: a
key of MODELS). Both sides are rendered from it: `dcpctl plan` flags and SGLang argv (flags SGLang
does not have, such as --hardware or --gpus-per-node, only pick the emulated platform). Deterministic.
"""
from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any, Iterator

import yaml

REPO = Path(__file__).resolve().parents[2]
HW_SM = {"h100-8": (90, False), "h200-8": (90, False), "b200-8": (100, False), "b300-8": (103, False),
         "gb200-nvl72": (100, True), "gb300-nvl72": (103, True)}
GPUS = {"h100-8": 8, "h200-8": 8, "b200-8": 8, "b300-8": 8, "gb200-nvl72": 4, "gb300-nvl72": 4}
ATTN = ("auto", "fa3", "flashmla", "flashinfer", "triton", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla",
        "aiter", "torch_native")
KV = ("auto", "bfloat16", "float16", "float32", "float64", "fp8_e4m3", "fp8_e5m2")
SPEC = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")


def _preset_config(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "presets/models" / f"{name}.yaml").read_text())["config"]


def model_configs() -> dict[str, dict[str, Any]]:
    """Every model preset under its own name, plus unquantized bf16 and fp32 DeepSeek-V3.1 variants."""
    out = {p.stem: _preset_config(p.stem) for p in sorted((REPO / "presets/models").glob("*.yaml"))}
    bf16 = copy.deepcopy(out["deepseek-v3.1"])
    bf16.pop("quantization_config", None)
    out["dsv31-bf16"] = bf16
    out["dsv31-fp32"] = {**bf16, "torch_dtype": "float32"}
    return out


def write_models(root: Path) -> dict[str, Path]:
    dirs = {}
    for name, cfg in model_configs().items():
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg, indent=1))
        dirs[name] = d
    return dirs


def _nodes(tp: int, pp: int, hw: str) -> int:
    return max(1, tp * pp // GPUS[hw])


def _topology() -> Iterator[dict[str, Any]]:
    for hw, tp, dcp, adp in itertools.product(("h200-8", "b200-8", "gb200-nvl72"), (1, 2, 4, 8, 16, 32),
                                              (1, 2, 4, 8, 16), (0, 2, 4)):
        c = {"model": "deepseek-v3.1", "hardware": hw, "tp_size": tp, "dcp_size": dcp,
             "nnodes": _nodes(tp, 1, hw)}
        if adp:
            c.update(dp_size=adp, enable_dp_attention=True)
        yield c
    for hw, tp, ep, pp, nn, dcp in itertools.product(("h200-8", "gb200-nvl72"), (4, 8, 16), (1, 4, 8, 16, 32),
                                                     (1, 2, 4), (1, 2, 4), (1, 4)):
        if hw == "gb200-nvl72" and (dcp == 1 or pp == 4):
            continue
        yield {"model": "deepseek-v3.1", "hardware": hw, "tp_size": tp, "ep_size": ep, "pp_size": pp,
               "nnodes": nn, "dcp_size": dcp}
    for tp, dp in ((8, 2), (16, 2), (4, 2)):  # whole-engine DP replicas (no attention DP)
        yield {"model": "deepseek-v3.1", "hardware": "h200-8", "tp_size": tp, "dp_size": dp, "dcp_size": 4,
               "nnodes": 1}


def _backends() -> Iterator[dict[str, Any]]:
    for hw, model, be, rq, dcp in itertools.product(HW_SM,
                                                    ("deepseek-v3.1", "dsv31-bf16", "dsv31-fp32", "kimi-k3"),
                                                    (None, "ag_rs", "a2a", "fi_a2a"), (None, True, False),
                                                    (1, 8)):
        if hw == "h100-8":
            continue
        tp = 16 if hw.startswith("gb") else 8
        c = {"model": model, "hardware": hw, "tp_size": tp, "dcp_size": dcp, "nnodes": _nodes(tp, 1, hw),
             "dcp_comm_backend": be, "dcp_replicate_q_proj": rq}
        if model == "kimi-k3":
            c.update(dp_size=2, enable_dp_attention=True, ep_size=tp)
        yield c


def _kernels() -> Iterator[dict[str, Any]]:
    for hw, attn, kv, page, dcp in itertools.product(("h200-8", "b200-8"), ATTN, KV, (None, 64), (1, 8)):
        yield {"model": "deepseek-v3.1", "hardware": hw, "tp_size": 8, "dcp_size": dcp,
               "attention_backend": attn, "kv_cache_dtype": kv, "page_size": page}
    for hw, attn, kv, page, dcp in itertools.product(("h200-8", "b200-8", "gb200-nvl72"),
                                                     ("auto", "cutedsl_mla", "tokenspeed_mla", "trtllm_mla",
                                                      "fa3", "flashinfer"),
                                                     ("auto", "bfloat16", "fp8_e4m3"), (None, 32, 64),
                                                     (1, 8)):
        tp = 16 if hw.startswith("gb") else 8
        yield {"model": "kimi-k3", "hardware": hw, "tp_size": tp, "dp_size": 2, "enable_dp_attention": True,
               "ep_size": tp, "nnodes": _nodes(tp, 1, hw), "dcp_size": dcp, "attention_backend": attn,
               "kv_cache_dtype": kv, "page_size": page}


def _speculative() -> Iterator[dict[str, Any]]:
    for hw, model, algo, k, draft, dcp in itertools.product(("h200-8", "b200-8"),
                                                            ("deepseek-v3.1", "kimi-k3"), (None, *SPEC),
                                                            (None, 4), (None, "tiny"), (1, 8)):
        c = {"model": model, "hardware": hw, "tp_size": 8, "dcp_size": dcp, "speculative_algorithm": algo,
             "speculative_num_draft_tokens": k, "speculative_draft_model_path": draft}
        if model == "kimi-k3":  # two nodes: the weights fit and a DCP8 group fits an attention-DP replica
            c.update(tp_size=16, dp_size=2, enable_dp_attention=True, ep_size=16, nnodes=2)
        yield c
    for algo, dpa, hic in itertools.product((None, *SPEC), (1, 2), (None, True)):  # DeepSeek + attention DP
        yield {"model": "deepseek-v3.1", "hardware": "h200-8", "tp_size": 8, "dcp_size": 4, "dp_size": dpa,
               "enable_dp_attention": dpa > 1 or None, "speculative_algorithm": algo,
               "speculative_draft_model_path": "tiny" if algo in ("DFLASH", "DSPARK") else None,
               "enable_hierarchical_cache": hic}


def _spec_params() -> Iterator[dict[str, Any]]:
    """EAGLE-family parameters: none (SGLang chooses), steps alone, steps + topk, draft tokens alone."""
    for hw, algo, (steps, topk, k), dcp in itertools.product(
            ("h200-8", "b200-8"), ("EAGLE", "NEXTN", "EAGLE3", "NGRAM"),
            ((None, None, None), (3, None, None), (3, 1, None), (3, 1, 4), (2, 1, 8), (4, 2, 8),
             (None, 1, None)),
            (1, 8)):
        yield {"model": "deepseek-v3.1", "hardware": hw, "tp_size": 8, "dcp_size": dcp,
               "speculative_algorithm": algo, "speculative_num_steps": steps, "speculative_eagle_topk": topk,
               "speculative_num_draft_tokens": k}


def _pd_hicache() -> Iterator[dict[str, Any]]:
    base = {"model": "deepseek-v3.1", "hardware": "h200-8", "tp_size": 8}
    for mode, tb, dcp, peer, hic in itertools.product(("prefill", "decode"), ("mooncake", "nixl", "fake"),
                                                      (1, 8), (None, 1, 8), (None, True)):
        yield {**base, "dcp_size": dcp, "disaggregation_mode": mode, "disaggregation_transfer_backend": tb,
               "disaggregation_peer_dcp_size": peer, "enable_hierarchical_cache": hic}
    for hic, l3, dcp, spec, mode in itertools.product((None, True), (None, "file", "mooncake"), (1, 8),
                                                      (None, "EAGLE"), ("null", "decode")):
        yield {**base, "dcp_size": dcp, "enable_hierarchical_cache": hic, "hicache_storage_backend": l3,
               "speculative_algorithm": spec, "speculative_num_draft_tokens": 4 if spec else None,
               "disaggregation_mode": mode}


PRESET_VARIATIONS: tuple[dict[str, Any], ...] = (
    {}, {"dcp_size": 1}, {"dcp_size": 4}, {"dcp_comm_backend": "a2a"}, {"dcp_comm_backend": "ag_rs"},
    {"dcp_comm_backend": "fi_a2a"}, {"dcp_replicate_q_proj": False}, {"dcp_replicate_q_proj": True},
    {"hardware": "b200-8"}, {"hardware": "h200-8"}, {"hardware": "gb300-nvl72"},
    {"kv_cache_dtype": "fp8_e4m3"}, {"page_size": 64}, {"context_len": 10_000_000_000_000},
    {"speculative_algorithm": "EAGLE"}, {"attention_backend": "flashinfer"},
)


def _presets() -> Iterator[dict[str, Any]]:
    for p in sorted((REPO / "presets/deployments").glob("*.yaml")):
        for var in PRESET_VARIATIONS:
            c = {"preset": p.stem, **var}
            if yaml.safe_load(p.read_text()).get("hardware") == "cpu" and "hardware" not in var:
                c["hardware"] = "h200-8"  # SGLang serves no CPU deployment here: plan the recipe on a GPU
            yield c


def _misc() -> Iterator[dict[str, Any]]:
    base = {"model": "deepseek-v3.1", "hardware": "h200-8", "tp_size": 8, "dcp_size": 8}
    for ctx in (1, 4096, 131072, 163840, 1_000_000, 10_000_000_000_000):
        yield {**base, "context_len": ctx}
    for mf in (0.3, 0.5, 0.95, 1.0):
        yield {**base, "mem_fraction_static": mf}
    for mrr in (1, 64, 4096):
        yield {**base, "max_running_requests": mrr}
    for model in ("kimi-k2", "kimi-linear-48b-a3b", "deepseek-v3", "tiny"):
        for hw, dcp in itertools.product(("h200-8", "b200-8"), (1, 2, 8)):
            yield {"model": model, "hardware": hw, "tp_size": 8, "dcp_size": dcp}
    yield {**base, "enable_prefill_cp": True}
    yield {**base, "dcp_size": 1, "enable_prefill_cp": True}


def _sglang_flags() -> Iterator[dict[str, Any]]:
    """`sglang serve` flags dcpctl passes through (or reads under SGLang's spelling), beside the DCP flags."""
    passthrough = ({"trust_remote_code": True}, {"chunked_prefill_size": 8192}, {"max_prefill_tokens": 16384},
                   {"schedule_policy": "lpm"}, {"random_seed": 1}, {"enable_metrics": True},
                   {"context_length": 131072}, {"decode_attention_backend": "flashinfer"},
                   {"decode_attention_backend": "triton"}, {"enable_mixed_chunk": True},
                   {"trust_remote_code": True, "chunked_prefill_size": 4096, "context_length": 65536})
    for hw, dcp in (("h200-8", 8), ("b200-8", 4)):
        for extra in passthrough:
            yield {"model": "deepseek-v3.1", "hardware": hw, "tp_size": 8, "dcp_size": dcp, **extra}
    # SGLang's abbreviations of dcpctl's flags (argparse prefixes): --tp, --dp
    yield {"model": "deepseek-v3.1", "hardware": "h200-8", "tp": 8, "dcp_size": 8}
    yield {"model": "deepseek-v3.1", "hardware": "h200-8", "tp": 8, "dp": 2, "enable_dp_attention": True,
           "dcp_size": 4}
    yield {"model": "kimi-k2", "hardware": "b200-8", "tp": 8, "dcp_size": 8, "trust_remote_code": True}


GROUPS = {"topology": _topology, "backends": _backends, "kernels": _kernels, "speculative": _speculative,
          "spec_params": _spec_params, "pd_hicache": _pd_hicache, "presets": _presets, "misc": _misc,
          "sglang_flags": _sglang_flags}


def cases() -> list[dict[str, Any]]:
    """Every case once (options with None values dropped), each tagged with its group."""
    out, seen = [], set()
    for group, gen in GROUPS.items():
        for c in gen():
            c = {k: v for k, v in c.items() if v is not None}
            key = json.dumps(c, sort_keys=True)
            if key not in seen:
                seen.add(key)
                out.append({"group": group, "opts": c})
    return out


def dcpctl_flags(opts: dict[str, Any], model_dirs: dict[str, Path]) -> list[str]:
    out: list[str] = []
    for k, v in opts.items():
        if k == "model":
            out += ["--model-path", str(model_dirs[v])]
        elif k == "speculative_draft_model_path":
            out += ["--speculative-draft-model-path", str(model_dirs[v])]
        elif k == "dcp_replicate_q_proj":
            out.append("--dcp-replicate-q-proj" if v else "--no-dcp-replicate-q-proj")
        elif v is True:
            out.append("--" + k.replace("_", "-"))
        else:
            out += ["--" + k.replace("_", "-"), str(v)]
    return out


SGLANG_NAMES = {"attention_backend": "--decode-attention-backend", "context_len": "--context-length"}
DCPCTL_ONLY = ("hardware", "gpus_per_node", "kda_state_fraction", "disaggregation_peer_dcp_size",
               "disaggregation_peer_page_size", "disaggregation_peer_kv_cache_dtype", "preset", "description")


def merged(opts: dict[str, Any]) -> dict[str, Any]:
    """A preset's recipe under the case's own options (as `dcpctl plan --preset` merges them)."""
    if "preset" not in opts:
        return dict(opts)
    recipe = yaml.safe_load((REPO / "presets/deployments" / f"{opts['preset']}.yaml").read_text())
    out = {k: v for k, v in recipe.items() if k != "description"}
    if opts.get("dcp_size") == 1 and "dcp_comm_backend" not in opts:
        out.pop("dcp_comm_backend", None)  # dcpctl decides the backend afresh at dcp 1; the recipe's is moot
    out.update(opts)
    return out


def sglang_argv(opts: dict[str, Any], model_dirs: dict[str, Path]) -> tuple[int, bool, list[str]]:
    """(SM, MNNVL, argv) of `sglang serve` for the same deployment; --device cuda: torch here is CPU-only."""
    m = merged(opts)
    sm, mnnvl = HW_SM[m.get("hardware", "h200-8")]
    argv = ["--model-path", str(model_dirs[m["model"]]), "--device", "cuda"]
    for k, v in m.items():
        if k in DCPCTL_ONLY or k == "model" or (k == "attention_backend" and v == "auto"):
            continue  # dcpctl's --attention-backend auto is SGLang's unset --decode-attention-backend
        if k == "speculative_draft_model_path":
            argv += ["--speculative-draft-model-path", str(model_dirs[v])]
        elif k == "dcp_replicate_q_proj":
            argv.append("--dcp-replicate-q-proj" if v else "--no-dcp-replicate-q-proj")
        elif v is True:
            argv.append(SGLANG_NAMES.get(k, "--" + k.replace("_", "-")))
        elif v is not False:
            argv += [SGLANG_NAMES.get(k, "--" + k.replace("_", "-")), str(v)]
    if m.get("nnodes", 1) > 1:
        argv += ["--node-rank", "0", "--dist-init-addr", "127.0.0.1:29500"]
    return sm, mnnvl, argv
