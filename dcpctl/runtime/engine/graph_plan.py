"""Which CUDA graphs an engine captures before ready, and the notes that say so: the decode graphs and each
layer's MLP pieces.  The model runner (engine/model_runner.py) captures them in warm_up and replays them.

The launch config's `cuda_graph.batch_sizes` (dcpctl/launch/cuda_graphs.py: SGLang's decode buckets up
to --cuda-graph-max-bs-decode, or --cuda-graph-bs-decode, or [] with --disable-cuda-graph / on CPU) says what
to capture.  A step replays a graph when every chunk in it is one token (decode, or a prompt's last
single-token chunk) and the batch fits the largest size; the batch is padded up to the next captured
size.  Under attention DP the replicas agree on the size first (Engine._agree).  A mixed step's decodes
replay their graph beside an eager forward of its prompt chunks (engine/mixed.py).  What cannot replay
runs eagerly, with one note saying why; a graph never changes a token (the same kernels, the same
order of operations: tests/runtime/engine/test_engine_graphs.py).

Not captured, with their reason: speculative decoding's steps (draft + verify shapes per step), a
hybrid model's KDA layers (request-indexed recurrent state).
"""
from __future__ import annotations

from typing import Any

from dcpctl.runtime.attention import backends
from dcpctl.runtime.attention.backends import ABSORBED
from dcpctl.runtime.engine.decode_graphs import DecodeGraphs
from dcpctl.runtime.graph_capture import Progress, unless_out_of_memory
from dcpctl.runtime.notes import note_once


def why_not(model: Any, spec: Any, sizes: list[int], state_pool: Any) -> str | None:
    """Why this engine replays no graph at all (None: it can)."""
    if not sizes:
        return None
    if state_pool is not None:
        return ("cuda graphs: off (a hybrid model's KDA layers keep request-indexed state the graphs do not "
                "capture)")
    from dcpctl.runtime.models.deepseek import DeepseekModel
    if not isinstance(model, DeepseekModel):
        return f"cuda graphs: off ({type(model).__name__} has no capturable decode step)"
    if spec is not None:
        return "cuda graphs: off (speculative decoding's draft and verify steps run eagerly)"
    return None


def prefill_graphs_plan(model: Any, section: Any, device: Any) -> tuple[list[int], str] | None:
    """(token counts, reason) when this engine captures each layer's MLP for its eager forwards (warm_up; the
    launch config's cuda_graph.prefill_tokens), else None, said once why where the section asked for them."""
    tokens = list(section.prefill_tokens) if section is not None else []
    if not tokens:
        if section is not None and section.prefill_reason:
            note_once(section.prefill_reason)
        return None
    if device.type != "cuda":
        return None
    from dcpctl.runtime.models.deepseek import DeepseekModel
    from dcpctl.runtime.models.mlp_graphs import MAX_PASSES, token_cap, why_not as mlp_why_not
    why = None if type(model) is DeepseekModel else f"{type(model).__name__} has no captured MLP pieces"
    why = why or mlp_why_not(model)
    if why:
        note_once(f"prefill cuda graphs: off ({why})")
        return None
    cap = token_cap(model)
    if cap is not None and tokens[-1] > cap:
        tokens = [t for t in tokens if t <= cap]
        if not tokens:
            note_once(f"prefill cuda graphs: off (no token count up to {cap}, the grouped block-FP8 experts' "
                      "limit)")
            return None
        return tokens, (f"{section.prefill_reason}; up to {cap} tokens here (the block-FP8 experts run "
                        f"grouped up to {cap} tokens a pass; a prompt chunk of up to {MAX_PASSES} x "
                        f"{tokens[-1]} tokens replays them in passes, a longer one runs its MLP eagerly)")
    return tokens, section.prefill_reason


def capture_decode(model: Any, alloc: Any, pool: Any, decisions: Any, v_dim: int, sizes: list[int],
                   reason: str, trash_slot: int, progress: Progress | None = None) -> DecodeGraphs:
    """The serving engine's decode graphs (logits and each row's argmax captured, context buckets), said
    once."""
    graphs = DecodeGraphs(model, alloc, pool, decisions, v_dim, sizes,
                          alloc.pages_for(alloc.virtual_capacity), trash_slot, logits=True, buckets=True,
                          progress=progress)
    note_once(f"{reason}; {len(graphs.graphs)} graphs ({len(graphs.sizes)} batch sizes x "
              f"{len(graphs.buckets)} context buckets) captured in {graphs.capture_s:.1f} s")
    if graphs.kernels:   # filled at capture (CUDA): the kernel each graph's shape picked
        note_once(f"decode attention kernel by context (tokens) and captured batch size: "
                  f"{kernel_summary(graphs.kernels, alloc.dcp)}")
    return graphs


def capture_mlp(model: Any, tokens: list[int], reason: str) -> Any:
    """Each layer's MLP captured at `tokens` (models/mlp_graphs.py), said once; None, said why, where the
    capture ran out of GPU memory."""
    from dcpctl.runtime.models.mlp_graphs import MlpGraphs
    g = unless_out_of_memory(lambda: MlpGraphs(model, tokens))
    if g is None:
        note_once(f"prefill cuda graphs: off (capturing the MLP at up to {max(tokens)} tokens ran out of GPU "
                  "memory; lower --cuda-graph-max-bs-prefill)")
        return None
    note_once(f"{reason}; {len(g.graphs)} pieces ({len(g.buckets)} token counts x {len(model.layers)} "
              f"layers) captured in {g.capture_s:.1f} s, {g.pool_bytes / 2**30:.2f} GiB")
    return g


def _says(name: str) -> str:
    # how a note names the absorbed backend `name` (its own label)
    return backends.get(ABSORBED, name).says() if (ABSORBED, name) in backends.REGISTRY else name


def kernel_summary(kernels: dict[tuple[int, int], str], c: int) -> str:
    """Which local attention kernel decodes at which context: per context bucket (its largest context in
    tokens: local rows x the DCP size c), the kernel of each captured batch size; neighbouring buckets alike
    are one."""
    by_bucket: dict[int, list[tuple[int, str]]] = {}
    for (b, rows), name in sorted(kernels.items()):
        by_bucket.setdefault(rows, []).append((b, _says(name)))
    parts: list[tuple[int, str]] = []
    for rows, picks in sorted(by_bucket.items()):
        names = sorted({n for _, n in picks})
        text = names[0] if len(names) == 1 else ", ".join(
            f"{n} at batch {','.join(str(b) for b, m in picks if m == n)}" for n in names)
        if parts and parts[-1][1] == text:
            parts[-1] = (rows * c, text)
        else:
            parts.append((rows * c, text))
    return "; ".join(f"<= {hi}: {text}" for hi, text in parts)
