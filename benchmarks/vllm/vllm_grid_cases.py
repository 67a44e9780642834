"""The case grid of benchmarks/vllm/vllm_grid.py: one deployment in vLLM's vocabulary, rendered both ways.

A case is a dict of `vllm serve` settings (keys below) plus `model` (a key of model_configs()) and
`hardware` (a dcpctl profile, which picks the emulated GPU). `dcpctl_flags` renders it as
`dcpctl plan --engine vllm ...` (vLLM's names, which dcpctl accepts under --engine vllm) and
`vllm_argv` as `vllm serve` argv. Deterministic.
"""
from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any, Iterator

import yaml

REPO = Path(__file__).resolve().parents[2]
# case key -> `vllm serve` flag (dcpctl accepts the same names under --engine vllm)
FLAGS = {"tp": "--tensor-parallel-size", "dp": "--data-parallel-size", "pp": "--pipeline-parallel-size",
         "dcp": "--decode-context-parallel-size", "pcp": "--prefill-context-parallel-size", "nnodes": "--nnodes",
         "dcp_comm_backend": "--dcp-comm-backend", "interleave": "--cp-kv-cache-interleave-size",
         "block_size": "--block-size", "kv_cache_dtype": "--kv-cache-dtype", "attention_backend": "--attention-backend",
         "max_model_len": "--max-model-len", "gpu_memory_utilization": "--gpu-memory-utilization",
         "max_num_seqs": "--max-num-seqs"}
BACKENDS = ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TOKENSPEED_MLA", "CUTLASS_MLA", "TRITON_MLA")
KV = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")


def model_configs() -> dict[str, dict[str, Any]]:
    """Every model preset under its own name (block-FP8 ones with the `activation_scheme` real checkpoints
    carry, which vLLM's fp8 config requires), plus an unquantized bf16 DeepSeek-V3.1."""
    out = {}
    for p in sorted((REPO / "presets/models").glob("*.yaml")):
        cfg = yaml.safe_load(p.read_text())["config"]
        if cfg.get("quantization_config", {}).get("quant_method") == "fp8":
            cfg["quantization_config"].setdefault("activation_scheme", "dynamic")
        out[p.stem] = cfg
    bf16 = copy.deepcopy(out["deepseek-v3.1"])
    bf16.pop("quantization_config")
    out["dsv31-bf16"] = bf16
    return out


def write_models(root: Path) -> dict[str, Path]:
    dirs = {}
    for name, cfg in model_configs().items():
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg, indent=1))
        dirs[name] = d
    return dirs


GPUS = {"h100-8": 8, "h200-8": 8, "b200-8": 8, "b300-8": 8, "gb200-nvl72": 4, "gb300-nvl72": 4}


def _nodes(c: dict[str, Any]) -> int:
    world = c.get("tp", 1) * c.get("dp", 1) * c.get("pp", 1) * c.get("pcp", 1)
    return max(1, world // GPUS[c["hardware"]])


def _topology() -> Iterator[dict[str, Any]]:
    for hw, tp, dcp, dp, ep in itertools.product(("h200-8", "b200-8", "gb200-nvl72"), (1, 2, 4, 8, 16),
                                                  (1, 2, 3, 4, 8, 16), (1, 2), (False, True)):
        c = {"model": "deepseek-v3.1", "hardware": hw, "tp": tp, "dcp": dcp, "dp": dp, "ep": ep}
        c["nnodes"] = _nodes(c)
        yield c
    for tp, pp, dcp, nn in itertools.product((4, 8, 16), (1, 2, 4), (1, 4, 8), (1, 2, 3, 4)):
        yield {"model": "deepseek-v3.1", "hardware": "h200-8", "tp": tp, "pp": pp, "dcp": dcp, "nnodes": nn}
    for tp, pcp, dcp, be in itertools.product((2, 4, 8), (1, 2, 4), (1, 2, 4, 8, 16, 32), (None, "a2a")):
        yield {"model": "deepseek-v3.1", "hardware": "h200-8", "tp": tp, "pcp": pcp, "dcp": dcp,
               "dcp_comm_backend": be, "nnodes": _nodes({"hardware": "h200-8", "tp": tp, "pcp": pcp})}


def _exchange() -> Iterator[dict[str, Any]]:
    for hw, model, be, rq, dcp in itertools.product(("h200-8", "b200-8", "b300-8"), ("deepseek-v3.1", "dsv31-bf16",
                                                                                     "kimi-k2"),
                                                    (None, "ag_rs", "a2a", "fi_a2a"), (None, True, False), (1, 8)):
        yield {"model": model, "hardware": hw, "tp": 8, "dcp": dcp, "dcp_comm_backend": be,
               "dcp_q_replicate": rq}


def _kernels() -> Iterator[dict[str, Any]]:
    for hw, be, kv, block, dcp in itertools.product(("h100-8", "h200-8", "b200-8", "b300-8"), (None, *BACKENDS), KV,
                                                    (None, 16, 32, 64, 128), (1, 8)):
        yield {"model": "deepseek-v3.1", "hardware": hw, "tp": 8, "dcp": dcp, "attention_backend": be,
               "kv_cache_dtype": kv, "block_size": block}


def _interleave() -> Iterator[dict[str, Any]]:
    for hw, il, block, dcp in itertools.product(("h200-8", "b200-8"), (1, 2, 16, 64, 128), (None, 16, 64, 128),
                                                (1, 4, 8)):
        yield {"model": "deepseek-v3.1", "hardware": hw, "tp": 8, "dcp": dcp, "interleave": il,
               "block_size": block}


def _models() -> Iterator[dict[str, Any]]:
    for model, hw, tp, dcp in itertools.product(("deepseek-v3", "deepseek-v3.1", "dsv31-bf16", "kimi-k2", "kimi-k3",
                                                 "kimi-linear-48b-a3b", "tiny"),
                                                ("h200-8", "b200-8"), (4, 8, 16), (1, 2, 4, 8)):
        c = {"model": model, "hardware": hw, "tp": tp, "dcp": dcp}
        c["nnodes"] = _nodes(c)
        yield c
    base = {"model": "deepseek-v3.1", "hardware": "h200-8", "tp": 8, "dcp": 8}
    for n in (1024, 163840, 163841, 1_000_000):
        yield {**base, "max_model_len": n}
    for g in (0.3, 0.5, 0.9, 1.0):
        yield {**base, "gpu_memory_utilization": g}
    for s in (1, 64, 1024):
        yield {**base, "max_num_seqs": s}


GROUPS = {"topology": _topology, "exchange": _exchange, "kernels": _kernels, "interleave": _interleave,
          "models": _models}


def cases() -> list[dict[str, Any]]:
    """Every case once (None values dropped, False kept only for dcp_q_replicate), tagged with its group."""
    out, seen = [], set()
    for group, gen in GROUPS.items():
        for c in gen():
            c = {k: v for k, v in c.items() if v is not None and (v is not False or k == "dcp_q_replicate")}
            key = json.dumps(c, sort_keys=True)
            if key not in seen:
                seen.add(key)
                out.append({"group": group, "opts": c})
    return out


def _common(c: dict[str, Any]) -> list[str]:
    out = []
    for k, v in c.items():
        if k in FLAGS:
            out += [FLAGS[k], str(v)]
        elif k == "ep":
            out.append("--enable-expert-parallel")
        elif k == "dcp_q_replicate":
            out.append("--dcp-q-replicate" if v else "--no-dcp-q-replicate")
    return out


def dcpctl_flags(c: dict[str, Any], model_dirs: dict[str, Path]) -> list[str]:
    return ["--engine", "vllm", "--model-path", str(model_dirs[c["model"]]), "--hardware", c["hardware"],
            *_common(c)]


def vllm_argv(c: dict[str, Any], model_dirs: dict[str, Path]) -> list[str]:
    argv = ["--model", str(model_dirs[c["model"]]), *_common(c)]
    if c.get("nnodes", 1) > 1:
        argv += ["--node-rank", "0", "--master-addr", "127.0.0.1"]
    return argv
