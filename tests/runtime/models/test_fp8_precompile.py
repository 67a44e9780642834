"""models/fp8_precompile.py on the CPU, for an sm_90 target (a stand-in driver; Triton's own ptxas compiles):
the specializations it compiles first are those the model's forwards then ask for (Triton's own cache keys),
compiled on threads into this process and Triton's on-disk cache (a later start loads them from there), and a
model whose weights are not kept FP8 has nothing to precompile."""
from __future__ import annotations

import pytest
import torch
from triton.runtime import driver
from triton.runtime.jit import JITFunction

from dcpctl.runtime.models import load_model
from dcpctl.runtime.kernels import fp8_dequant, fp8_gemm, fp8_gemv, fp8_parts
from dcpctl.runtime.models import fp8_precompile as fp
from dcpctl.runtime.models.mlp import BLOCK_TOKENS, GROUPED_MAX_TOKENS, MoE
from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.tiny import write_tiny_model
from tests.runtime.fp8_compile_check import Sm90Driver
from tests.runtime.ref_context import RefContext
from tests.runtime.models.test_model_fp8 import SHAPE, write_fp8

KERNELS = (fp8_gemm._fp8_gemm_kernel, fp8_gemv._fp8_gemv_kernel, fp8_dequant._dequant_kernel,
           fp8_parts._quant_kernel)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    dense = write_tiny_model(tmp_path_factory.mktemp("dense"), **SHAPE)
    return write_fp8(dense, tmp_path_factory.mktemp("fp8") / "ckpt", block=(128, 128))


def fp8_model(ckpt, keep=True):
    """The tiny model with FP8 weights kept on the CPU, its routed experts stacked as on a GPU (grouped
    GEMMs)."""
    m = load_model(ckpt, ParallelState.single(), False, torch.bfloat16, "cpu", keep_fp8=keep)
    for layer in m.layers:
        if isinstance(layer.mlp, MoE) and layer.mlp.stacked is None and keep:
            layer.mlp.stack_experts()
    return m


@pytest.fixture
def sm90(monkeypatch, tmp_path):
    """An sm_90 stand-in driver and an empty Triton cache; the FP8 kernels' in-memory caches restored
    after."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    active = driver._active
    driver.set_active(Sm90Driver())
    saved = [k.device_caches.pop(0, None) for k in KERNELS]
    yield tmp_path / "triton"
    driver._active = active    # reset_active() would look for a real driver
    for k, s in zip(KERNELS, saved):
        k.device_caches.pop(0, None)
        if s is not None:
            k.device_caches[0] = s


def forwards(m, tokens: list[int]) -> None:
    """A forward at each token count: up to 8 as a decode step (one token of each of n sequences), else a
    prefill of one sequence."""
    for t in tokens:
        ctx = RefContext(m.cfg.kv_lora_rank)
        ctx.set_batch(*(([*range(t)], [0] * t) if t <= 8 else ([0] * t, [*range(t)])))
        m.forward(torch.randint(0, 250, (t,)), ctx.positions, ctx)


def asked(m, tokens: list[int]) -> set[fp.Spec]:
    """The specializations the forwards ask Triton to compile (none launches)."""
    seen: dict[str, fp.Spec] = {}
    with fp.skipped(seen), torch.no_grad():
        forwards(m, tokens)
    return set(seen.values())


def test_the_kernels_compiled_first_are_those_the_forwards_ask_for(ckpt, sm90):
    from dcpctl.runtime import settings
    m = fp8_model(ckpt)
    assert any(isinstance(layer.mlp, MoE) for layer in m.layers)
    tokens = [1, 2, 3, 8, 15, 16, 24, 40]
    for mode in ("w8a16", "auto"):
        with settings.using(fp8_gemm=mode):
            specs = fp.specializations(fp.gemm_calls(m, tokens), m.dtype, "cpu")
            assert len(specs) == len(set(specs)) > 4
            assert set(specs) == asked(m, tokens)
    with settings.using(fp8_gemm="auto"):   # prefill rows: w8a8 (no cuBLAS on this CPU: the Triton kernel)
        long = [GROUPED_MAX_TOKENS + 40]
        assert asked(m, long) == set(fp.specializations(fp.gemm_calls(m, long), m.dtype, "cpu"))
    with settings.using(fp8_gemm="w8a16"):
        # beyond GROUPED_MAX_TOKENS the routed experts run one GEMM each over as many rows as routed there:
        # all foreseen, with kernels of row counts this routing did not produce
        assert asked(m, long) < set(fp.specializations(fp.gemm_calls(m, long), m.dtype, "cpu"))
        # past BLOCK_TOKENS the experts run in passes: the last pass of 40 tokens runs grouped, and is
        # foreseen too
        passes = [BLOCK_TOKENS + 40]
        assert asked(m, passes) <= set(fp.specializations(fp.gemm_calls(m, passes), m.dtype, "cpu"))
        assert not asked(m, passes) <= set(fp.specializations(fp.gemm_calls(m, long), m.dtype, "cpu"))


@pytest.mark.parametrize("mode", ["w8a16", "w8a8"])
def test_a_grouped_table_entry_is_foreseen_as_the_forwards_launch_it(ckpt, sm90, monkeypatch, mode):
    # the tiny model's routed experts (8, top-2): rows per expert t * 2 // 8; an entry of each grouped section
    # per expert shape covering some of those rows (others past the bound: DEFAULT_TILES; w8a16 up to 16 rows
    # in all: the few-rows kernel first)
    from dcpctl.runtime import settings
    from dcpctl.runtime.kernels import fp8_tiles
    m = fp8_model(ckpt)
    stacked = next(layer.mlp.stacked for layer in m.layers if isinstance(layer.mlp, MoE))
    (n, k), = {tuple(w.shape[1:]) for w in stacked[:-1]}                 # gate and up (or joined), then down
    assert tuple(stacked[-1].shape[1:]) == (k, n)
    entries = {f"{n},{k}": [[3, {"bn": 32, "stages": 4, "fold": True}]], f"{k},{n}": [[6, {"swap": True}]]}
    table = fp8_tiles.parse({"grouped": entries, "grouped_w8a16": entries}, "test")
    tokens = [1, 2, 8, 15, 16, 24, 40]
    with settings.using(fp8_gemm=mode):
        plain = set(fp.specializations(fp.gemm_calls(m, tokens), m.dtype, "cpu"))
        monkeypatch.setattr(fp8_tiles, "current", lambda device=None: table)
        specs = set(fp.specializations(fp.gemm_calls(m, tokens), m.dtype, "cpu"))
        assert specs == asked(m, tokens) != plain


def test_threads_compile_into_memory_and_the_cache_and_a_later_start_loads(ckpt, sm90, monkeypatch):
    m = fp8_model(ckpt)
    tokens = [1, 16]
    specs = fp.specializations(fp.gemm_calls(m, tokens), m.dtype, "cpu")
    n = fp.compile_specs(specs, threads=2)
    # a compile that fails is left to the launch that needs it (compile_specs): seen once in a while in
    # full-suite runs on 2 CPUs (9 of 10); a second call compiles only what the first left, so every spec
    # still compiles once
    n += fp.compile_specs(specs, threads=2) if n < len(specs) else 0
    assert n == len(specs) == len(list(sm90.rglob("*.cubin")))
    # the forwards find every kernel compiled: Triton's hook (called before a compile) is never called;
    # `warmup` keeps Triton from launching what it finds
    plain = JITFunction.run
    monkeypatch.setattr(JITFunction, "run", lambda self, *a, grid, warmup, **kw: plain(self, *a, grid=grid,
                                                                                      warmup=True, **kw))
    assert asked(m, tokens) == set()
    for k in KERNELS:   # a later start: nothing in memory, everything in the cache
        k.device_caches.pop(0, None)
    assert fp.compile_specs(specs, threads=2) == 0
    assert asked(m, tokens) == set() and len(list(sm90.rglob("*.cubin"))) == len(specs)


def test_nothing_to_precompile_without_fp8_weights_on_a_gpu(ckpt):
    assert fp.gemm_calls(fp8_model(ckpt, keep=False), [1, 16]) == []    # dequantized at load (CPU, pre-sm_89)
    assert fp.precompile(fp8_model(ckpt), [1, 16]) is None                # FP8 kept, but not on a GPU


def test_prefill_pieces_stop_where_the_fp8_experts_stop_running_grouped(ckpt, sm90, monkeypatch):
    # block-FP8 routed experts run grouped up to GROUPED_MAX_TOKENS a pass under w8a16 (past it: a GEMM chain
    # per expert, a host sync), and under auto up to where the table says per_expert, so the MLP pieces stop
    # there, and the precompile foresees their token counts
    from dcpctl.contract.launch_config import CudaGraphSection
    from dcpctl.launch.cuda_graphs import prefill_section
    from dcpctl.runtime import settings
    from dcpctl.runtime.engine.graph_plan import prefill_graphs_plan
    from dcpctl.runtime.kernels import fp8_tiles
    from dcpctl.runtime.models.mlp_graphs import token_cap, why_not
    m = fp8_model(ckpt)
    assert token_cap(fp8_model(ckpt, keep=False)) is None            # dequantized at load: no cap
    # auto without a table: grouped up to PER_EXPERT_ROWS rows an expert (the tiny model: 8 experts, top-2)
    moe = next(layer.mlp for layer in m.layers if isinstance(layer.mlp, MoE))
    cap = token_cap(m)
    assert moe.runs_grouped(cap) and not moe.runs_grouped(cap + 1)
    assert cap * 2 // 8 == fp8_tiles.PER_EXPERT_ROWS
    with settings.using(fp8_gemm="w8a16"):
        assert why_not(m) is None and token_cap(m) == GROUPED_MAX_TOKENS
        sec = CudaGraphSection((), "", **{k: tuple(v) if isinstance(v, list) else v
                                          for k, v in prefill_section("cuda", False, None, None, None, 8192)
                                          .items()})
        tokens, reason = prefill_graphs_plan(m, sec, torch.device("cuda"))   # only the device's kind is read
        assert tokens[-1] == GROUPED_MAX_TOKENS and tokens == [t for t in sec.prefill_tokens if t <= 512]
        assert "up to 512 tokens here" in reason
        with_pieces = set(fp.specializations(fp.gemm_calls(m, [1, *tokens]), m.dtype, "cpu"))
        assert set(fp.specializations(fp.gemm_calls(m, [1]), m.dtype, "cpu")) < with_pieces
    # auto with a table whose grouped methods say per_expert past 32 rows per expert (t * 2 // 8 rows per
    # expert, so past 131 tokens)
    n, k = moe.stacked[0].shape[1:]
    table = fp8_tiles.parse({"methods": {"grouped": {f"{n},{k}": [[32, "w8a8"], [1 << 30, "per_expert"]]}}},
                            "test")
    monkeypatch.setattr(fp8_tiles, "current", lambda device=None: table)
    assert moe.runs_grouped(131) and not moe.runs_grouped(132) and token_cap(m) == 131
    long = [300]
    assert asked(m, long) < set(fp.specializations(fp.gemm_calls(m, long), m.dtype, "cpu"))
