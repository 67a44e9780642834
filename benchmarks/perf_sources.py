"""Measured cells for benchmarks/perf_accuracy.py: each file of benchmarks/data (or a `dcpctl bench rank`
file) as the deployment it measured and its cells (decode compute, TTFT, served output throughput).

| source                               | checkpoint (one H200, TP 1 unless the file says) | measured         |
| ------------------------------------ | ------------------------------------------------ | ---------------- |
| `dcpctl bench rank` files (--rank)   | the file's plan, its rank, the real model's size | compute_us_full  |
| decode_flashmla_h200.json            | `bench decode --shape v3`: V3 attention, 2 dense | graph_ms         |
| fp8_serve_h200.json `step`,          | fp8_model_check's V3 layers (3, 16 experts),     | graph_ms         |
| fp8_decode_step_profile_h200.json    | FP8 and its bf16 twin                            |                  |
| serve_h200.json, step_fusions_h200   | serve_peers' dense checkpoint (4 dense layers)   | graph step ms    |
| prefill_ttft_h200.json, _moe_,       | dense, serve_peers' MoE (16 layers), V3 FP8 and  | dcpctl_ms (TTFT) |
| fp8_prefill_ttft_h200.json           | its bf16 twin                                    |                  |
| serve_mixed_h200.json (dense1k),     | as above, served by `dcpctl launch`              | output tok/s     |
| fp8_serve_h200.json                  |                                                  |                  |
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

from dcpctl.plan import presets
from dcpctl.plan.attention_names import MEASURED
from dcpctl.plan.hardware import hardware_from_dict
from dcpctl.plan.model import ModelSpec, spec_from_config
from dcpctl.plan.planner import make_plan
from dcpctl.plan.request import PlanRequest
from dcpctl.plan.resolve import request_from_options
from dcpctl.plan.topology import Topology


@dataclass(frozen=True)
class Cell:
    source: str
    req: PlanRequest
    batch: int  # decode rows; served: concurrency; TTFT: 1
    context: int  # decode context; TTFT and served: the prompt's tokens
    measured: float  # decode compute or TTFT in seconds; served: output tokens a second
    extra: dict[str, Any] = field(default_factory=dict)  # served: output_len, measured ITL


def _config(name: str) -> dict[str, Any]:
    from benchmarks.fp8_model_check import v3_config
    from dcpctl.bench.decode import SHAPES
    from dcpctl.runtime.tiny import tiny_config

    moe = {
        "n_routed_experts": 32,
        "num_experts_per_tok": 8,
        "n_group": 8,
        "topk_group": 4,
        "moe_intermediate_size": 256,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
    }  # serve_peers.MOE
    v3 = dict(SHAPES["v3"], torch_dtype="bfloat16")
    if name == "v3-fp8":
        return v3_config(3, 16)
    if name == "v3-fp8-bf16":
        return {k: v for k, v in v3_config(3, 16).items() if k != "quantization_config"}
    layers = {"v3-2": 2, "dense-4": 4, "moe-16": 16}[name]
    return tiny_config(
        **{
            **v3,
            "num_hidden_layers": layers,
            "first_k_dense_replace": layers,
            **(moe if name == "moe-16" else {}),
        }
    )


def h200_request(name: str, backend: str = "auto") -> PlanRequest:
    """One rank of TP 1 on an H200 serving checkpoint `name`, pages of 64 (as the runs were made)."""
    hw = hardware_from_dict(presets.hardware_profiles()["h200-8"], "profile h200-8")
    spec: ModelSpec = spec_from_config(_config(name), name=name)
    req = PlanRequest(
        topology=Topology(gpus_per_node=8), model=spec, hardware=hw, page_size=64, attention_backend=backend
    )
    return make_plan(req).request


def _rows(doc: dict[str, Any], *keys: str) -> list[dict[str, Any]]:
    for k in keys:
        doc = doc[k]
    return doc["rows"]  # type: ignore[return-value]


def decode_cells(data: Path) -> Iterator[Cell]:
    """The benchmarks/data decode files' CUDA-graph steps (no collectives at TP 1: the whole step is
    compute)."""
    fm = data / "decode_flashmla_h200.json"
    if fm.exists():
        doc = json.loads(fm.read_text())
        runs = [
            ("without", "triton", _rows(doc, "without")),
            ("flashmla", "flashmla", _rows(doc, "flashmla")),
            ("flashmla_again", "flashmla", _rows(doc, "flashmla_again")),
            ("another_call", "flashmla", _rows(doc, "another_call", "flashmla")),
        ]
        runs += [
            (f"without_call[{i}]", "triton", r["rows"]) for i, r in enumerate(doc["without_call"]["runs"])
        ]
        for tag, be, rows in runs:
            req = h200_request("v3-2", be)
            yield from (
                Cell(f"{fm.name}:{tag}", req, r["batch"], r["context"], r["graph_ms"] * 1e-3) for r in rows
            )
    for path, sections in (
        ("fp8_serve_h200.json", (("step", "fp8"), ("step", "bf16"))),
        ("fp8_decode_step_profile_h200.json", (("v3-fp8",), ("v3-fp8-bf16",))),
    ):
        f = data / path
        if not f.exists():
            continue
        doc = json.loads(f.read_text())
        for keys in sections:
            req = h200_request("v3-fp8" if keys[-1] in ("fp8", "v3-fp8") else "v3-fp8-bf16")
            yield from (
                Cell(f"{path}:{keys[-1]}", req, r["batch"], r["context"], r["graph_ms"] * 1e-3)
                for r in _rows(doc, *keys)
            )
    yield from _dense_cells(data)


def _dense_cells(data: Path) -> Iterator[Cell]:
    req = h200_request("dense-4")
    f = data / "step_fusions_h200.json"
    if f.exists():
        rows = [
            r for r in json.loads(f.read_text())["rows"] if r["variant"] == "pdl"
        ]  # every fusion: the default
        yield from (Cell(f"{f.name}:pdl", req, r["batch"], r["context"], r["graph_ms"] * 1e-3) for r in rows)
    f = data / "serve_h200.json"
    if f.exists():
        for c in json.loads(f.read_text())["summary"]["cells"]:
            yield Cell(
                f"{f.name}:graph step", req, c["concurrency"], c["prompt"] + 32, c["graph_step_ms"] * 1e-3
            )


def ttft_cells(data: Path) -> Iterator[Cell]:
    """Single prompts on an idle engine (benchmarks/prefill_ttft.py): dcpctl_ms."""
    files = [
        ("prefill_ttft_h200.json", "dense-4", None),
        ("prefill_ttft_moe_h200.json", "moe-16", None),
        ("fp8_prefill_ttft_h200.json", "v3-fp8", "v3-fp8"),
        ("fp8_prefill_ttft_h200.json", "v3-fp8-bf16", "v3-fp8-bf16"),
    ]
    for name, ckpt, key in files:
        f = data / name
        if not f.exists():
            continue
        doc = json.loads(f.read_text())
        doc = doc[key] if key else doc
        req = replace(
            h200_request(ckpt), engine_args=(("--chunked-prefill-size", str(doc["chunked_prefill_size"])),)
        )
        for length, row in doc["lengths"].items():
            yield Cell(f"{name}:{ckpt}", req, 1, int(length), row["dcpctl_ms"] * 1e-3, {"floor": row})


def served_cells(data: Path) -> Iterator[Cell]:
    """`dcpctl bench serve` output throughput (closed loop: c clients, each one request at a time);
    `steps`: the decode source whose graph steps are this server's (the host gap)."""
    f = data / "serve_mixed_h200.json"
    if f.exists():
        runs = json.loads(f.read_text())["cells"]["dense1k"]["serve"]["cells"]["dense"]
        yield from _served(f"{f.name}:dense1k", h200_request("dense-4"), runs, "step_fusions_h200.json")
    f = data / "fp8_serve_h200.json"
    if f.exists():
        doc = json.loads(f.read_text())["starts"]
        for ck, name in (("fp8", "v3-fp8"), ("bf16", "v3-fp8-bf16")):
            yield from _served(f"{f.name}:{ck}", h200_request(name), doc[ck]["bench"], f.name)


def _served(source: str, req: PlanRequest, runs: dict[str, Any], steps: str) -> Iterator[Cell]:
    for c, r in runs.items():
        tput = r.get("output_throughput", r.get("output_token_throughput"))
        yield Cell(
            source,
            req,
            int(c),
            r["input_len"],
            float(tput),
            {
                "output_len": r["output_len"],
                "itl_p50_s": r["itl_ms"]["p50"] * 1e-3,
                "ttft_s": r["ttft_ms"]["mean"] * 1e-3,
                "steps": steps,
            },
        )


def _profile(name: str | None, device: str) -> str:
    """The file's hardware profile, or the built-in one of the GPU it ran on (a run on `--hardware auto`)."""
    from dcpctl import tuning

    profiles = presets.hardware_profiles()
    if name in profiles:
        return str(name)
    return next((n for n, p in sorted(profiles.items()) if tuning.same_gpu(p["gpu_name"], device)), "auto")


def rank_cells(path: Path) -> Iterator[Cell]:
    """A `dcpctl bench rank` file's uniform cells, as the plan it names (compute_us_full)."""
    from dcpctl.plan.perf_measured import read_measured

    ms = read_measured(path)
    p = ms.plan
    model = p["model"]
    key = "model" if model in presets.names("models") else "model_path"
    opts = {
        key: model,
        "hardware": _profile(p.get("hardware"), ms.doc["device"].get("name", "")),
        "tp_size": p["tp_size"],
        "dcp_size": p["dcp_size"],
        "ep_size": p["ep_size"],
        "kv_cache_dtype": p["kv_cache_dtype"],
        "page_size": p.get("page_size"),
        "dcp_comm_backend": p["dcp_comm_backend"] if p["dcp_size"] > 1 else None,
        "dcp_replicate_q_proj": p["dcp_replicate_q_proj"] if p["dcp_size"] > 1 else None,
    }
    if p["attn_dp_size"] > 1:
        opts.update(dp_size=p["attn_dp_size"], enable_dp_attention=True)
    if p.get("attention_backend") in MEASURED:  # the kernel the run ran (FlashMLA where it was built)
        opts["attention_backend"] = p["attention_backend"]
    req = make_plan(request_from_options({k: v for k, v in opts.items() if v is not None})).request
    for c in ms.cells("uniform"):
        yield Cell(f"{path.name}", req, c["batch"], c["context"], c["compute_us_full"] * 1e-6)
