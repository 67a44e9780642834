"""`dcpctl generate`: run prompts through the bundled DCP runtime under torchrun."""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from dcpctl import console
from dcpctl.launch.device import device_option, resolve_device
from dcpctl.cli.options import collect, plan_options, positive_ints
from dcpctl.contract.launch_config import DEFAULT_CHUNKED_PREFILL
from dcpctl.plan.errors import UserError
from dcpctl.plan.planner import make_plan
from dcpctl.plan.resolve import request_from_options
from dcpctl.runtime.fits import misfit

DEFAULT_PRESET = "tiny-cpu"


GRAPH_FLAGS = ("disable_cuda_graph", "cuda_graph_max_bs", "cuda_graph_bs", "cuda_graph_backend_prefill",
               "disable_prefill_cuda_graph", "cuda_graph_max_bs_prefill", "cuda_graph_bs_prefill")


def cuda_graph_options(params: dict[str, Any], device: str, max_running: int | None,
                       chunk: int) -> dict[str, Any]:
    """The launch config's cuda_graph section from (and popped off) the runtime's graph flags
    (GRAPH_FLAGS)."""
    from dcpctl.launch.cuda_graphs import cuda_graph_section, prefill_section
    sizes, prefill = params.pop("cuda_graph_bs", None), params.pop("cuda_graph_bs_prefill", None)
    disable = bool(params.pop("disable_cuda_graph", False))
    backend = params.pop("cuda_graph_backend_prefill", None)
    if params.pop("disable_prefill_cuda_graph", False):
        if backend not in (None, "disabled"):
            raise UserError("--disable-prefill-cuda-graph contradicts --cuda-graph-backend-prefill "
                            f"{backend}")
        backend = "disabled"
    return {**cuda_graph_section(device, disable, params.pop("cuda_graph_max_bs", None),
                                 positive_ints(sizes, "cuda-graph-bs", "batch sizes") if sizes else None,
                                 max_running),
            **prefill_section(device, disable, backend, params.pop("cuda_graph_max_bs_prefill", None),
                              positive_ints(prefill, "cuda-graph-bs-prefill", "token counts")
                              if prefill else None,
                              chunk)}


SCHEDULE_FLAGS = ("enable_mixed_chunk", "max_prefill_tokens", "schedule_policy")


def schedule_options(flags: dict[str, Any], chunked_prefill_size: int) -> dict[str, Any]:
    """The launch config's schedule section from the scheduling flags (popped off params as
    SCHEDULE_FLAGS)."""
    from dcpctl.launch.schedule import schedule_section
    return schedule_section(flags.get("enable_mixed_chunk"), flags.get("max_prefill_tokens"),
                            chunked_prefill_size, flags.get("schedule_policy"))


def resolve_run_options(ctx: click.Context, params: dict[str, Any], device: str) -> dict[str, Any]:
    """No --model-path and no --preset: the built-in trained tiny model on CPU (tp 2, dcp 2)."""
    if not params.get("model_path") and not params.get("preset") and not params.get("model"):
        params["preset"] = DEFAULT_PRESET
    opts = collect(ctx, params)
    fill_default_model(opts, "model preset {model!r} has no weights: pass --model-path DIR")
    return settle_device(ctx, opts, device)[0]


def settle_device(ctx: click.Context, opts: dict[str, Any], device: str) -> tuple[dict[str, Any], str]:
    """--device auto made concrete for this plan's ranks on this node (device.py); the hardware follows it
    unless --hardware was typed."""
    typed_hw = (ctx.get_parameter_source("hardware") == click.core.ParameterSource.COMMANDLINE
                and opts.get("hardware"))
    if device == "auto":
        if typed_hw == "cpu":
            console.info("--device auto: cpu (--hardware cpu)")
            device = "cpu"
        else:
            device = resolve_device("auto",
                                    ranks_here=request_from_options({**opts, "hardware": "cpu"})
                                    .topology.ranks_per_node)
    if not typed_hw:
        opts["hardware"] = "cpu" if device == "cpu" else "auto"
    return opts, device


def fill_default_model(opts: dict[str, Any], no_weights: str) -> None:
    """Without model_path, serve the shipped trained tiny model (the `tiny` preset names it too), once,
    saying so on stderr; any other model preset has no weights: UserError(no_weights)."""
    if opts.get("model_path"):
        return
    if opts.get("model") not in (None, "tiny"):
        raise UserError(no_weights.format(model=opts["model"]))
    from dcpctl.launch.default_model import default_model
    model = default_model()
    console.info(f"model: {model.path.name}: {model.reason}")
    opts["model_path"] = str(model.path)
    opts.pop("model", None)


def parse_prompt_ids(values: tuple[str, ...]) -> list[list[int]]:
    out = []
    for v in values:
        items = v.split(",")
        if not v.strip():
            raise UserError(f"--prompt-ids needs at least one token id, got {v!r}")
        if any(not x.strip() for x in items):
            raise UserError("--prompt-ids has an empty item (token "
                            f"{[x.strip() for x in items].index('') + 1}) in {v!r}: give comma-separated "
                            "integers such as 1,2,3")
        try:
            ids = [int(x) for x in items]
        except ValueError:
            raise UserError(f"--prompt-ids must be comma-separated integers, got {v!r}") from None
        if min(ids) < 0:
            raise UserError(f"--prompt-ids must be non-negative token ids, got {v!r}")
        out.append(ids)
    return out


def check_chunk(chunked_prefill_size: int) -> None:
    if chunked_prefill_size != -1 and chunked_prefill_size < 1:
        raise UserError(f"--chunked-prefill-size must be a positive token count or -1 (no chunking), "
                        f"got {chunked_prefill_size}")


def check_devices(device: str, ranks_here: int) -> None:
    """--device cuda: enough visible GPUs for this node's ranks, checked before any rank starts."""
    if device == "cuda":
        import torch
        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have < ranks_here:
            raise UserError(f"--device cuda needs {ranks_here} CUDA GPU(s) on this node, {have} visible "
                            f"(torch {torch.__version__}, CUDA {torch.version.cuda or 'not built in'}); "
                            "use --device cpu or a smaller --tp-size")


def show_plan_warnings(plan: Any) -> None:
    """What the plan changed or dropped (`dcpctl plan` prints the same lines)."""
    for w in plan.warnings:
        console.warn(w)


def printable(text: str) -> str:
    """Model text for a terminal: control bytes, NULs and other non-printables escaped (\\x00, \\u200b)."""
    return "".join(c if c.isprintable() or c in "\n\t" else ascii(c)[1:-1] for c in text)


def check_weights(path: str) -> None:
    """Missing or truncated safetensors fail here with exit 2, before any rank starts."""
    import struct
    d = Path(path)
    files = sorted(d.glob("*.safetensors")) if d.is_dir() else []
    if not files:
        raise UserError(f"no *.safetensors weights in {path}: --model-path must be a checkpoint directory")
    for f in files:
        try:
            with f.open("rb") as fh:
                head = fh.read(8)
                n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
                size = f.stat().st_size
                header = json.loads(fh.read(n)) if 0 < n <= size - 8 else None
        except (OSError, ValueError) as e:
            raise UserError(f"cannot read {f}: {getattr(e, 'strerror', None) or e}") from None
        if not isinstance(header, dict):
            raise UserError(f"{f} is not a safetensors file (bad header)")
        ends = [v["data_offsets"][1] for k, v in header.items()
                if k != "__metadata__" and isinstance(v, dict) and isinstance(v.get("data_offsets"), list)]
        if ends and 8 + n + max(ends) > size:
            raise UserError(f"{f} is truncated: {size:,} bytes, its header needs {8 + n + max(ends):,}")


def check_fits(prompts: list[list[int]], max_new: int, cfg: dict[str, Any], vocab: int,
               max_positions: int | None = None) -> None:
    # PD: the decode side holds it all
    inst = cfg["disaggregation"]["decode"] if "disaggregation" in cfg else cfg
    virtual = inst["kv"]["capacity_tokens"] * inst["topology"]["dcp_size"]
    k = (cfg.get("speculative") or {}).get("num_draft_tokens", 0)  # verification writes K rows ahead
    for ids in prompts:
        bad = misfit(len(ids), max_new, virtual, max_positions, k)
        if bad:
            hint = ("raise --max-total-tokens or --dcp-size"
                    if bad.limit == "capacity" else "lower --max-new-tokens")
            raise UserError(f"{bad.sentence()}; {hint}")
        bad = [i for i in ids if i >= vocab]
        if bad:
            raise UserError(f"prompt id {bad[0]} is outside the vocabulary (vocab_size {vocab})")


def ambiguous_flag(flag: str) -> Any:
    """A flag SGLang 0.5.23's parser calls ambiguous (a prefix of its -decode and -prefill forms): refused the
    same way here, with plan's message, rather than taken as one of them."""
    def refuse(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None:
            from dcpctl.plan.sglang_args import SGLANG
            SGLANG.table.lookup(flag)      # raises UserError: "... is ambiguous in `sglang serve` ..."
    # a name of its own: the default one (cuda_graph_max_bs) is the real -decode option's, whose value it
    # would see
    name = "ambiguous_" + flag.strip("-").replace("-", "_")
    return click.option(flag, name, hidden=True, expose_value=False, callback=refuse, is_eager=True)


def runtime_options(f: Any) -> Any:
    """The bundled runtime's options that generate and launch share."""
    for opt in reversed([
        click.option("--dtype", type=click.Choice(["float64", "float32", "bfloat16", "float16"]),
                     default=None, help="Compute dtype (default: float32 on CPU, bfloat16 on CUDA)."),
        device_option(),
        click.option("--max-total-tokens", type=click.IntRange(min=1), default=16384, show_default=True,
                     help="Virtual KV tokens to allocate (capped by the plan's capacity)."),
        click.option("--chunked-prefill-size", type=int, default=DEFAULT_CHUNKED_PREFILL, show_default=True,
                     help="-1: no chunking."),
        click.option("--enable-mixed-chunk/--disable-mixed-chunk", "enable_mixed_chunk", default=None,
                     help="Mix prefill chunks into the decode steps (default: on, so no stream waits on a "
                          "whole prompt; SGLang's flag, off there by default)."),
        click.option("--max-prefill-tokens", type=click.IntRange(min=1), default=None,
                     help="Most tokens of one step's prefill, decodes included when mixed (SGLang's; default "
                          "16384; --chunked-prefill-size also bounds it)."),
        click.option("--schedule-policy", type=click.Choice(["fcfs"]), default=None,
                     help="Queue order: first come, first served (SGLang's other policies need its radix "
                          "tree)."),
        click.option("--disable-cuda-graph", is_flag=True,
                     help="CUDA: run every step eagerly (no graph capture before ready; decode and "
                          "prefill)."),
        click.option("--cuda-graph-max-bs-decode", "cuda_graph_max_bs", type=click.IntRange(min=1),
                     help="CUDA: largest decode batch captured as a graph (default: the max running "
                          "requests, at most 256; SGLang's bucket sizes up to it)."),
        click.option("--cuda-graph-bs-decode", "cuda_graph_bs", metavar="N,N,...",
                     help="CUDA: the exact decode batch sizes to capture, comma-separated (instead of the "
                          "buckets)."),
        *(ambiguous_flag(f) for f in ("--cuda-graph-max-bs", "--cuda-graph-bs")),
        click.option("--cuda-graph-backend-prefill", type=click.Choice(["breakable", "disabled"]),
                     default=None, help="CUDA: capture each layer's MLP at prefill token counts, attention "
                          "running between the pieces (breakable, the default), or run prefill eagerly "
                          "(disabled)."),
        click.option("--disable-prefill-cuda-graph", is_flag=True,
                     help="CUDA: run prefill and extend steps eagerly (= --cuda-graph-backend-prefill "
                          "disabled)."),
        click.option("--cuda-graph-max-bs-prefill", type=click.IntRange(min=1), default=None,
                     help="CUDA: most tokens of a captured prefill piece (default: min(8192, "
                          "--chunked-prefill-size); SGLang's bucket sizes up to it)."),
        click.option("--cuda-graph-bs-prefill", metavar="N,N,...",
                     help="CUDA: the exact prefill token counts to capture, comma-separated (instead of the "
                          "buckets)."),
    ]):
        f = opt(f)
    return f


@click.command()
@plan_options
@click.option("--prompt", "prompts", multiple=True, help="Prompt text (repeatable).")
@click.option("--prompt-ids", "prompt_ids", multiple=True,
              help="Prompt as comma-separated token ids (repeatable).")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--temperature", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="0 = greedy.")
@click.option("--top-k", type=int, default=-1, show_default=True)
@click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), default=1.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--logprobs", is_flag=True, help="Report the log-probability of every generated token.")
@runtime_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_context
def generate(ctx: click.Context, prompts: tuple[str, ...], prompt_ids: tuple[str, ...], max_new_tokens: int,
             temperature: float, top_k: int, top_p: float, seed: int, logprobs: bool, dtype: str | None,
             device: str, max_total_tokens: int, chunked_prefill_size: int, fmt: str, **params: Any) -> None:
    """Generate continuations with the bundled striped-decode runtime.

    Plans the topology (exit 2 if invalid), renders the launch config, starts the ranks under
    torchrun (gloo on CPU, NCCL on CUDA), loads the checkpoint sharded across ranks and prints each
    continuation. Without --model-path the built-in tiny DeepSeek-V3-shaped model trained on Python
    standard-library sources (docs/generate.md) runs on 2 CPU ranks with DCP 2.

    \b
    Examples:
      dcpctl generate --prompt "def "                          # the built-in model writes Python
      dcpctl generate --model-path DIR --tp-size 4 --dcp-size 4 --prompt TEXT --max-new-tokens 64
      dcpctl generate --prompt-ids 1,2,3 --prompt-ids 4,5 --temperature 0 --dtype float64 --logprobs \\
          --format json
    """
    from dcpctl.launch.config import render_launch_config
    from dcpctl.launch.runner import RuntimeFailed, run_torchrun, write_launch_files
    check_chunk(chunked_prefill_size)
    graph_flags = {k: params.pop(k, None) for k in GRAPH_FLAGS}
    schedule_flags = {k: params.pop(k, None) for k in SCHEDULE_FLAGS}
    opts = resolve_run_options(ctx, params, "cpu" if device == "auto" else device)
    opts, device = settle_device(ctx, opts, device)
    plan = make_plan(request_from_options(opts))
    dtype = dtype or ("bfloat16" if device == "cuda" else "float32")
    args = (opts["model_path"], dtype, device, max_total_tokens, chunked_prefill_size)
    if plan.request.disaggregation_mode != "null":  # both PD instances in one launch (docs/pd.md)
        from dcpctl.launch.pd import render_pd_from_plan
        cfg = render_pd_from_plan(plan, *args).to_dict()
    else:
        cfg = render_launch_config(plan, *args).to_dict()
    check_devices(device, int(cfg["world_size"]))
    show_plan_warnings(plan)
    check_weights(opts["model_path"])
    ids = parse_prompt_ids(prompt_ids)
    tok = _tokenizer(opts["model_path"], needed=bool(prompts) or not ids)
    ids += [tok.encode(p, add_bos=True) for p in prompts] if prompts else []
    if not ids:
        ids = [tok.encode("Hello", add_bos=True)]
    check_fits(ids, max_new_tokens, cfg, plan.request.model.vocab_size,
               plan.request.model.max_position_embeddings)
    if "disaggregation" not in cfg:   # PD instances decode eagerly (docs/launch.md)
        cfg["cuda_graph"] = cuda_graph_options(graph_flags, device,
                                               min(len(ids), cfg["kv"].get("max_running_requests")
                                                   or len(ids)), chunked_prefill_size)
        cfg["schedule"] = schedule_options(schedule_flags, chunked_prefill_size)
    reqs = [{"prompt_ids": p, "max_new_tokens": max_new_tokens, "temperature": temperature, "top_k": top_k,
             "top_p": top_p, "seed": seed, "logprobs": logprobs} for p in ids]
    with tempfile.TemporaryDirectory(prefix="dcpctl-") as tmp:
        env = write_launch_files(Path(tmp), cfg, requests=reqs, result=None)
        try:
            run_torchrun(cfg, env)
        except RuntimeFailed as e:
            console.error(str(e))
            sys.exit(1)
        result = json.loads(Path(env["DCPCTL_RESULT"]).read_text())
    _print(result, tok, fmt, logprobs)


def _tokenizer(path: str, needed: bool) -> Any:
    """The checkpoint's tokenizer; None when it has none and only --prompt-ids were given (no text then)."""
    from dcpctl.runtime.tokenizer import TokenizerError, load_tokenizer
    try:
        return load_tokenizer(path)
    except TokenizerError as e:
        if needed:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"--prompt needs a tokenizer, and {path} has no usable one ({first}); "
                            "pass --prompt-ids instead") from None
        return None


def _print(result: dict[str, Any], tok: Any, fmt: str, logprobs: bool) -> None:
    for o in result["outputs"]:
        if tok is not None:
            o["text"] = tok.decode(o["output_ids"])
        if not logprobs:
            o.pop("output_logprobs", None)
    if fmt == "json":
        console.write_text(json.dumps(result))
        return
    for o in result["outputs"]:
        shown = repr(tok.decode(o["prompt_ids"])) if tok is not None else ",".join(map(str, o["prompt_ids"]))
        console.out.print(f"[bold]prompt[/] ({len(o['prompt_ids'])} tokens) -> {escape(shown)}")
        console.out.print(printable(o["text"]) if tok is not None else "output ids: " +
                          ",".join(map(str, o["output_ids"])) + " (no tokenizer: no text)", markup=False)
    console.info(f"kv rows per rank: {result['stats'].get('kv_rows_per_rank')}")
    spec = result["stats"].get("spec")
    if spec:
        console.info(f"speculative {spec['algorithm']} (K = {spec['num_draft_tokens']}): acceptance rate "
                     f"{spec['acceptance_rate']:.3f} "
                     f"({spec['draft_tokens_accepted']}/{spec['draft_tokens_proposed']} draft tokens), "
                     f"{spec['tokens_per_target_step']:.2f} tokens per target step; draft kv rows per rank "
                     f"(replicated): {spec['draft_kv_rows_per_rank']}")
