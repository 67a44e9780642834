"""Measured decode cells for benchmarks/perf_accuracy.py: each file of benchmarks/data (or a
`dcpctl bench rank` file) as the deployment it measured and its cells; files are named by the GPU they ran on
(TAG: h200, h100, ...; the TTFT and served files: benchmarks/perf_serving.py).

| source                               | checkpoint (TP 1 unless the file says)           | measured         |
| ------------------------------------ | ------------------------------------------------ | ---------------- |
| `dcpctl bench rank` files (--rank,   | the file's plan, its rank, the real model's size | compute_us (as   |
| rank_*_TAG.json)                     | (its layers under --layers), on the GPU it ran on| run)             |
| decode_flashmla_h200.json            | `bench decode --shape v3`: V3 attention, 2 dense | graph_ms         |
| fp8_serve_TAG.json `step`,           | fp8_model_check's V3 layers (3, 16 experts),     | graph_ms         |
| fp8_decode_step_profile_TAG.json     | FP8 and its bf16 twin (any device with the file) |                  |
| serve_h200.json, step_fusions_h200   | serve_peers' dense checkpoint (4 dense layers)   | graph step ms    |
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

from dcpctl.plan import presets
from dcpctl.plan.errors import UserError
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
    from benchmarks.serve_peers import MOE
    from dcpctl.bench.decode import SHAPES
    from dcpctl.runtime.tiny import tiny_config

    v3 = dict(SHAPES["v3"], torch_dtype="bfloat16")
    if name == "v3-fp8":
        return v3_config(3, 16)
    if name == "v3-fp8-bf16":
        return {k: v for k, v in v3_config(3, 16).items() if k != "quantization_config"}
    layers = {"v3-2": 2, "dense-4": 4, "moe-16": 16, "rank-moe-4": 4}[name]
    return tiny_config(
        **{
            **v3,
            "num_hidden_layers": layers,
            "first_k_dense_replace": layers,
            **(MOE if name in ("moe-16", "rank-moe-4") else {}),
        }
    )


def profile_of(device: str) -> str:
    """The built-in hardware profile of a files' device tag (h100 -> h100-8)."""
    names = sorted(presets.hardware_profiles())
    found = [n for n in names if n.split("-")[0] == device]
    if not found:
        raise UserError(f"--device {device} is no built-in hardware profile's GPU; valid: "
                        f"{', '.join(sorted({n.split('-')[0] for n in names}))}")
    return found[0]


def request_for(name: str, device: str = "h200", backend: str = "auto") -> PlanRequest:
    """One rank of TP 1 on the device's GPU serving checkpoint `name`, pages of 64 (as the runs were made)."""
    profile = profile_of(device)
    hw = hardware_from_dict(presets.hardware_profiles()[profile], f"profile {profile}")
    spec: ModelSpec = spec_from_config(_config(name), name=name)
    req = PlanRequest(
        topology=Topology(gpus_per_node=8), model=spec, hardware=hw, page_size=64, attention_backend=backend
    )
    return make_plan(req).request


def row(c: Cell, fit: bool, predicted: float) -> dict[str, Any]:
    """A judged cell as perf_accuracy reports and writes it."""
    return {
        "source": c.source,
        "batch": c.batch,
        "context": c.context,
        "measured": c.measured,
        "predicted": predicted,
        "error": predicted / c.measured - 1,
        "fit": fit,
        **({"routing": c.extra["routing"]} if "routing" in c.extra else {}),
    }


def split(
    cells: list[Cell], fit_batches: set[int] | None, fit_contexts: set[int] | None = None
) -> list[tuple[Cell, bool]]:
    """(cell, fitted on it): the listed batches and/or contexts, else every other cell of each source in
    (batch, context) order; a bench rank file's `busiest` cells are never fitted on."""
    out = []
    for src in dict.fromkeys(c.source for c in cells):
        mine = sorted((c for c in cells if c.source == src), key=lambda c: (c.batch, c.context))
        named = fit_batches is not None or fit_contexts is not None
        out += [
            (
                c,
                c.extra.get("routing") != "busiest"
                and (
                    (fit_batches is None or c.batch in fit_batches)
                    and (fit_contexts is None or c.context in fit_contexts)
                    if named
                    else i % 2 == 0
                ),
            )
            for i, c in enumerate(mine)
        ]
    return out


def _rows(doc: dict[str, Any], *keys: str) -> list[dict[str, Any]]:
    for k in keys:
        doc = doc[k]
    return doc["rows"]  # type: ignore[return-value]


def rank_files(data: Path, device: str) -> list[Path]:
    """The device's `dcpctl bench rank` files in `data` (rank_*_TAG.json)."""
    return sorted(data.glob(f"rank_*_{device}.json"))


def decode_cells(data: Path, device: str = "h200") -> Iterator[Cell]:
    """The single-GPU decode files' CUDA-graph steps (no collectives at TP 1: the whole step is compute): the
    FP8 checkpoint's and its twin's on any device with the files, the H200's others on the H200 alone; the
    bench rank files are read apart (rank_files)."""
    fm = data / "decode_flashmla_h200.json"
    if device == "h200" and fm.exists():
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
            req = request_for("v3-2", backend=be)
            yield from (
                Cell(f"{fm.name}:{tag}", req, r["batch"], r["context"], r["graph_ms"] * 1e-3) for r in rows
            )
    for path, sections in (
        (f"fp8_serve_{device}.json", (("step", "fp8"), ("step", "bf16"))),
        (f"fp8_decode_step_profile_{device}.json", (("v3-fp8",), ("v3-fp8-bf16",))),
    ):
        f = data / path
        if not f.exists():
            continue
        doc = json.loads(f.read_text())
        for keys in sections:
            req = request_for("v3-fp8" if keys[-1] in ("fp8", "v3-fp8") else "v3-fp8-bf16", device)
            yield from (
                Cell(f"{path}:{keys[-1]}", req, r["batch"], r["context"], r["graph_ms"] * 1e-3)
                for r in _rows(doc, *keys)
            )
    if device == "h200":
        yield from _dense_cells(data)


def _dense_cells(data: Path) -> Iterator[Cell]:
    req = request_for("dense-4")
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


def device_profile(device: str) -> str | None:
    """The built-in hardware profile of the GPU named `device` (None: there is none)."""
    from dcpctl import tuning

    profiles = presets.hardware_profiles()
    return next((n for n, p in sorted(profiles.items()) if tuning.same_gpu(p["gpu_name"], device)), None)


# checkpoints benchmarks/gpu.sh writes for `bench rank` (a path of the GPU machine's) -> _config's name
RANK_CHECKPOINTS = {"dcpctl-rank-moe": "rank-moe-4"}


def rank_cells(path: Path) -> Iterator[Cell]:
    """A `dcpctl bench rank` file's cells as they ran (compute_us over the layers run; perf_measured.Ran), the
    plan it names timed on the GPU it ran on (an H100 standing in for the plan's H200 is judged as an H100):
    `uniform` cells with the experts they read, and at EP 1 `busiest` ones (one draw of the model's router)
    with the model's own expected experts (extra["routing"]; never fitted on)."""
    from dcpctl.plan.perf_measured import read_measured

    ms = read_measured(path)
    p = ms.plan
    model = p["model"]
    key = "model" if model in presets.names("models") else "model_path"
    opts = {
        key: model,
        "hardware": p.get("hardware"),
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
    spec = None
    if key == "model_path" and Path(model).name in RANK_CHECKPOINTS and not Path(model).exists():
        spec = spec_from_config(_config(RANK_CHECKPOINTS[Path(model).name]), name=Path(model).name)
    here = device_profile(str(ms.doc["device"].get("name", "")))
    if opts["hardware"] not in presets.hardware_profiles():   # a run on `--hardware auto`
        opts["hardware"] = here or "auto"
    req = make_plan(request_from_options({k: v for k, v in opts.items() if v is not None}, spec)).request
    if here:
        req = replace(req, hardware=hardware_from_dict(presets.hardware_profiles()[here], f"profile {here}"))
    routings = ("uniform", "busiest") if p["ep_size"] == 1 else ("uniform",)
    for r in routings:
        for c in ms.cells(r):
            ran = ms.ran(c, own_experts=r == "uniform")
            name = path.name if r == "uniform" else f"{path.name}:{r}"
            yield Cell(name, req, c["batch"], c["context"], ms.ran_s(c), {"ran": ran, "routing": r})
