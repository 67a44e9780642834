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
         "dcp": "--decode-context-parallel-size", "pcp": "--prefill-context-parallel-size",
         "nnodes": "--nnodes", "dcp_comm_backend": "--dcp-comm-backend",
         "interleave": "--cp-kv-cache-interleave-size", "block_size": "--block-size",
         "kv_cache_dtype": "--kv-cache-dtype", "attention_backend": "--attention-backend",
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


# `vllm serve --config FILE` files (written beside the models; a case names one as `@FILE`)
SERVE_CONFIGS = {"dcp4-eager.yaml": "tensor-parallel-size: 8\ndecode_context_parallel_size: "
                                    "4\nenforce-eager: true\n",
                 "mtp-flashmla.yaml": "speculative-config:\n  method: mtp\n  num_speculative_tokens: 1\n"
                                      "attention-backend: flashmla\n"}


def write_models(root: Path) -> dict[str, Path]:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in SERVE_CONFIGS.items():
        (root / name).write_text(text)
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
    for hw, model, be, rq, dcp in itertools.product(("h200-8", "b200-8", "b300-8"),
                                                    ("deepseek-v3.1", "dsv31-bf16", "kimi-k2"),
                                                    (None, "ag_rs", "a2a", "fi_a2a"), (None, True, False),
                                                    (1, 8)):
        yield {"model": model, "hardware": hw, "tp": 8, "dcp": dcp, "dcp_comm_backend": be,
               "dcp_q_replicate": rq}


def _kernels() -> Iterator[dict[str, Any]]:
    for hw, be, kv, block, dcp in itertools.product(("h100-8", "h200-8", "b200-8", "b300-8"),
                                                    (None, *BACKENDS), KV, (None, 16, 32, 64, 128), (1, 8)):
        yield {"model": "deepseek-v3.1", "hardware": hw, "tp": 8, "dcp": dcp, "attention_backend": be,
               "kv_cache_dtype": kv, "block_size": block}


def _interleave() -> Iterator[dict[str, Any]]:
    for hw, il, block, dcp in itertools.product(("h200-8", "b200-8"), (1, 2, 16, 64, 128),
                                                (None, 16, 64, 128), (1, 4, 8)):
        yield {"model": "deepseek-v3.1", "hardware": hw, "tp": 8, "dcp": dcp, "interleave": il,
               "block_size": block}


def _models() -> Iterator[dict[str, Any]]:
    for model, hw, tp, dcp in itertools.product(("deepseek-v3", "deepseek-v3.1", "dsv31-bf16", "kimi-k2",
                                                 "kimi-k3", "kimi-linear-48b-a3b", "tiny"),
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


# `vllm serve` spellings of modelled options, as vLLM's FlexibleArgumentParser reads them (each replaces the
# case's own flags): underscores, dotted JSON sub-options, case, human-readable lengths, prefixes, `=` forms
SPELLINGS: tuple[tuple[str, ...], ...] = (
    ("--tensor_parallel_size", "8"), ("--tensor-parallel-size=8",), ("-tp", "8"), ("--tensor-parallel", "8"),
    ("--tensor-parallel-size", "8", "--decode_context_parallel_size", "8"), ("-tp", "8", "-dcp=8"),
    ("-tp", "8", "-dcp", "8", "--attention-backend", "flashmla"),
    ("-tp", "8", "-dcp", "8", "--attention-backend", "FlashMLA"),
    ("-tp", "8", "-dcp", "8", "--attention-backend", "auto"),
    ("-tp", "8", "-dcp", "8", "--attention_backend=triton_mla"),
    ("-tp", "8", "-dcp", "8", "--attention-config.backend", "FLASHMLA"),
    ("-tp", "8", "-dcp", "8", "--attention-config.backend=flashmla"),
    ("-tp", "8", "-dcp", "8", "--attention-config", '{"backend": "FLASHMLA"}'),
    ("-tp", "8", "-dcp", "8", "-ac", '{"backend": "TRITON_MLA"}'),
    ("-tp", "8", "-dcp", "8", "--attention-config.backend", "FLASHMLA", "--attention-backend", "FLASHMLA"),
    ("-tp", "8", "-dcp", "8", "--max-model-len", "32k"), ("-tp", "8", "-dcp", "8", "--max-model-len", "128K"),
    ("-tp", "8", "-dcp", "8", "--max-model-len", "-1"), ("-tp", "8", "-dcp", "8", "--max-model-len", "auto"),
    ("-tp", "8", "-dcp", "8", "--max_model_len=160k"), ("-tp", "8", "-dcp", "8", "--max-model-len", "1M"),
    ("-tp", "8", "-dcp", "8", "--block_size", "64"), ("-tp", "8", "-dcp", "8", "--kv_cache_dtype", "fp8"),
    ("-tp", "8", "-dcp", "8", "--dcp_comm_backend", "a2a", "--dcp_q_replicate"),
    ("-tp", "8", "-dcp", "8", "--no-dcp-q-replicate"),
    ("-tp", "8", "-dcp", "8", "--gpu_memory_utilization=0.8"),
    ("-tp", "8", "-dcp", "8", "--cp_kv_cache_interleave_size", "8", "--block-size", "64"),
    ("-tp", "4", "-dp", "2", "--enable_expert_parallel", "-dcp", "4"),
    ("-tp", "8", "-dcp", "8", "--max-num-seqs", "64"), ("--config", "@dcp4-eager.yaml"),
    ("--config", "@dcp4-eager.yaml", "-dcp", "8"),
    ("-tp", "8", "-dcp", "8", "--config", "@mtp-flashmla.yaml"), )
# passed-through options that change vLLM's verdict or what it resolves, each with and without DCP
PASSED: tuple[tuple[str, ...], ...] = (
    (), ("--enforce-eager",), ("--max-num-batched-tokens", "16k"), ("--enable-eplb",),
    ("--enable-eplb", "-ep"), ("--enable-dbo",), ("--enable-dbo", "-ep"), ("--dtype", "half"),
    ("--dtype", "float16"), ("--dtype", "bfloat16"), ("--dtype", "float32"), ("--dtype", "float"),
    ("--dtype", "half", "--kv-cache-dtype", "bfloat16"),
    ("--dtype", "float16", "--kv-cache-dtype", "float16"), ("--dtype", "half", "--kv-cache-dtype", "fp8"),
    ("--hf-overrides", '{"max_position_embeddings": 327680}', "--max-model-len", "300000"),
    ("--max-model-len", "300000",),
    ("--hf-overrides.max_position_embeddings", "327680", "--max-model-len", "200k"),
    ("--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'),
    ("--disable-extensible-kv-cache",), ("--enable-extensible-kv-cache",), ("--kv-cache-memory-bytes", "20G"),
    ("--num-gpu-blocks-override", "4096"),
    ("--gpu-memory-utilization", "0.9", "--disable-extensible-kv-cache"),
    ("--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'),
    ("--speculative-config",
     '{"method": "mtp", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1}'),
    ("--speculative-config",
     '{"method": "mtp", "num_speculative_tokens": 1, "draft_tensor_parallel_size": 4}'),
    ("--speculative-config.method", "mtp", "--speculative-config.num_speculative_tokens", "2"),
    ("--cp-kv-cache-interleave-size", "0"), ("--cp-kv-cache-interleave-size", "-1"), ("--block-size", "0"),
    ("--served-model-name", "dsv3", "--port", "9000"), ("-O", "0"),
    ("--compilation-config.cudagraph_mode", "NONE"), )


def _spellings() -> Iterator[dict[str, Any]]:
    for hw, model, args in itertools.product(("h200-8", "b200-8"), ("deepseek-v3.1", "kimi-k2"), SPELLINGS):
        yield {"model": model, "hardware": hw, "args": list(args)}


def _passed() -> Iterator[dict[str, Any]]:
    for hw, model, (tp, dcp), args in itertools.product(("h200-8", "b200-8"), ("deepseek-v3.1", "dsv31-bf16"),
                                                         ((8, 1), (8, 8), (4, 2), (1, 1)), PASSED):
        yield {"model": model, "hardware": hw, "tp": tp, "dcp": dcp, "args": list(args)}


def _exports() -> Iterator[dict[str, Any]]:
    """`dcpctl export vllm` of a plan, its node-0 line fed to vLLM (vllm_grid.py): vLLM must resolve the
    plan."""
    for hw, model, (tp, dcp, more) in itertools.product(
            ("h200-8", "b200-8"), ("deepseek-v3.1", "dsv31-bf16", "kimi-k2"),
            ((8, 8, ()), (8, 4, ("--dcp-comm-backend", "a2a", "--dcp-q-replicate")), (8, 1, ()),
             (8, 8, ("--kv-cache-dtype", "fp8")), (8, 8, ("--block-size", "128")),
             (8, 8, ("--max-model-len", "64k")), (8, 8, ("--gpu-memory-utilization", "0.85")),
             (8, 8, ("--enforce-eager", "--max-num-batched-tokens", "8192")),
             (8, 8, ("--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}')),
             (8, 8, ("--dtype", "half")), (8, 8, ("--attention-config.backend", "triton_mla")),
             (4, 2, ("-dp", "2", "-ep")), (8, 8, ("--cp-kv-cache-interleave-size", "16")))):
        yield {"model": model, "hardware": hw, "tp": tp, "dcp": dcp, "args": list(more), "export": True}


GROUPS = {"topology": _topology, "exchange": _exchange, "kernels": _kernels, "interleave": _interleave,
          "models": _models, "spellings": _spellings, "passed": _passed, "exports": _exports}


def cases() -> list[dict[str, Any]]:
    """Every case once (None values dropped, False kept only for dcp_q_replicate), tagged with its group."""
    out, seen = [], set()
    for group, gen in GROUPS.items():
        for c in gen():
            c = {k: v for k, v in c.items() if v is not None and (v is not False or k == "dcp_q_replicate")
                 and v != []}
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


def _args(c: dict[str, Any], model_dirs: dict[str, Path]) -> list[str]:
    """The case's raw `vllm serve` tokens, `@FILE` as the path of a SERVE_CONFIGS file."""
    root = model_dirs[c["model"]].parent
    return [str(root / a[1:]) if a.startswith("@") else a for a in c.get("args", ())]


def dcpctl_flags(c: dict[str, Any], model_dirs: dict[str, Path]) -> list[str]:
    return ["--engine", "vllm", "--model-path", str(model_dirs[c["model"]]), "--hardware", c["hardware"],
            *_common(c), *_args(c, model_dirs)]


def vllm_argv(c: dict[str, Any], model_dirs: dict[str, Path]) -> list[str]:
    argv = ["--model", str(model_dirs[c["model"]]), *_common(c), *_args(c, model_dirs)]
    if c.get("nnodes", 1) > 1:
        argv += ["--node-rank", "0", "--master-addr", "127.0.0.1"]
    return argv
