"""FlashMLA as a local attention backend, on CPU: availability, the measured choice, its build inputs, its
wiring.

FlashMLA needs an sm_90 GPU (tests/runtime/attention/test_gpu_flashmla.py, test_gpu_backends.py); here a
stand-in for its extension computes what flash_mla_cuda computes from the very arguments the runtime hands it
(q [T, 1, H, R], k_cache [pages, 64, 1, R], block table rows, local lengths, metadata), including its +inf lse
for a zero-length row, so the per-row tables, the empty-shard rule and the base-e LSE are checked against
unsplit attention at DCP 1, 2 and 4 through the merge.
"""
import dataclasses
import io
import json
import math
import tarfile

import pytest
import torch

from dcpctl.bench.kernel_table import table_from_bench, write
from dcpctl.plan.attention_table import Key, decide, load_table
from dcpctl.runtime.attention.flashmla_setup import flashmla_missing
from dcpctl.runtime.attention import flashmla, flashmla_setup
from dcpctl.runtime.attention.merge import merge_stacked
from tests.runtime.shards import rank_shards, unsplit

ALL = {"triton": None, "flashinfer": None, "flashmla": None}


def test_availability_from_plan_facts(monkeypatch):
    monkeypatch.delenv("DCPCTL_FLASHMLA_SDIST", raising=False)
    assert flashmla_missing(64).startswith("FlashMLA is not built here (tools/gpu_env.sh prepare, then "
                                           "$DCPCTL_FLASHMLA_SDIST")
    monkeypatch.setenv("DCPCTL_FLASHMLA_SDIST", "/x/flashmla.tar.gz")
    assert flashmla_missing(64) is None and flashmla_missing() is None
    assert flashmla_missing(16) == "page size 16: FlashMLA's kernel reads pages of 64 rows only"
    pool = torch.zeros(4, 64, 576, dtype=torch.bfloat16)
    assert flashmla.blocker(pool, 512, torch.bfloat16) == "the KV pool is not on a GPU"


def _table(tmp_path):
    cells = []
    for b, us in ((1, {"triton": 10.0, "flashinfer": 12.0, "flashmla": 11.0}),
                  (64, {"triton": 90.0, "flashinfer": 60.0, "flashmla": 50.0})):
        cells.append({"heads": 128, "ctx": 65536, "batch": b,
                      "backends": {k: {"time_us": v} for k, v in us.items()}})
    path = tmp_path / "t.json"
    write(table_from_bench({"device": "NVIDIA H200", "kv_dtype": "bf16", "cells": cells},
                           "dcpctl bench kernel"), path)
    return load_table(path)


def test_measured_choice_with_three_backends(tmp_path):
    t, key = _table(tmp_path), Key(128, "bf16", 64, "NVIDIA H200")
    rule = decide(key, "auto", ALL, t)
    assert (rule.pick(1, 65536), rule.pick(64, 65536)) == ("triton", "flashmla")
    assert rule.summary() in ("triton (flashmla at B=64 ctx=64K)", "flashmla (triton at B=1 ctx=64K)")
    gone = decide(key, "auto", {**ALL, "flashmla": "page size 16: no"}, t)
    assert gone.pick(64, 65536) == "flashinfer" and "not available: flashmla: page size 16: no" in gone.reason
    asked = decide(key, "flashmla", {**ALL, "flashmla": "FlashMLA is not built here"}, t)
    assert (asked.fixed == "triton"
            and asked.reason == "--attention-backend flashmla asked for, but FlashMLA is not built here")
    assert decide(key, "flashmla", ALL, t).fixed == "flashmla"
    # a caller that knows only two backends (an older table reader) still gets a reason, not a KeyError
    assert "flashmla: not known to this runtime" in decide(key, "auto", {"triton": None, "flashinfer": None},
                                                           t).reason


def test_plan_says_why_flashmla_is_out_whatever_the_environment(monkeypatch):
    from click.testing import CliRunner
    from dcpctl.cli.main import cli
    args = ["plan", "--model-preset", "deepseek-v3", "--hardware", "h200-8", "--tp-size", "8", "--dcp-size",
            "8", "--page-size", "64", "--format", "json"]
    monkeypatch.delenv("DCPCTL_FLASHMLA_SDIST", raising=False)
    bare = CliRunner().invoke(cli, args).stdout
    d = json.loads(bare)["decisions"]["local_attention_backend"]
    assert "flashmla: FlashMLA is built from source at run time" in d["reason"], d
    # the runtime's build source, not the plan's
    monkeypatch.setenv("DCPCTL_FLASHMLA_SDIST", "/x/flashmla.tar.gz")
    assert CliRunner().invoke(cli, args).stdout == bare


def _tar(path, top, files):
    with tarfile.open(path, "w:gz") as tf:
        for name, text in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(text)
            tf.addfile(info, io.BytesIO(text.encode()))
    return path


def test_build_inputs_come_from_the_two_tarballs(tmp_path, monkeypatch):
    # a FlashMLA tarball without CUTLASS of its own (an older vendored tarball): CUTLASS from FlashInfer's
    # sdist
    mla = _tar(tmp_path / "flashmla-abc.tar.gz", "flashmla-abc", {s: "" for s in flashmla_setup.SOURCES})
    fi = _tar(tmp_path / "fi.tar.gz", "flashinfer_python-0.2.14", {
        "3rdparty/cutlass/include/cutlass/cutlass.h": "", "flashinfer/__init__.py": "", "csrc/big.cu": ""})
    assert not flashmla_setup.own_cutlass(mla)
    srcs, incs = flashmla_setup.sources(mla, fi, tmp_path / "work")
    assert srcs == [str(tmp_path / "work/flashmla-abc" / s) for s in flashmla_setup.SOURCES]
    assert incs == [str(tmp_path / "work/flashmla-abc/csrc"),
                    str(tmp_path / "work/flashinfer_python-0.2.14/3rdparty/cutlass/include")]
    assert not (tmp_path / "work/flashinfer_python-0.2.14/csrc").exists()       # only CUTLASS's headers
    with pytest.raises(FileNotFoundError, match="rerun tools/gpu_env.sh prepare"):
        flashmla_setup.sources(mla, None, tmp_path / "work2")
    assert "-gencode=arch=compute_90a,code=sm_90a" in flashmla_setup.NVCC_FLAGS
    (tmp_path / "cuda/include/cccl").mkdir(parents=True)      # CUDA 13: CCCL's headers, for g++ on
                                                              # flash_api.cpp
    assert flashmla_setup.host_includes(str(tmp_path / "cuda")) == [f"-I{tmp_path / 'cuda/include/cccl'}"]
    assert flashmla_setup.host_includes(str(tmp_path / "none")) == flashmla_setup.host_includes(None) == []
    monkeypatch.setenv("DCPCTL_FLASHMLA_SDIST", str(mla))
    monkeypatch.setenv("DCPCTL_FLASHINFER_SDIST", str(tmp_path / "none.tar.gz"))
    flashmla_setup.load.cache_clear()
    try:
        mod, why = flashmla_setup.load()
        assert mod is None and why == ("flashmla-abc.tar.gz has no CUTLASS of its own and "
                                       f"$DCPCTL_FLASHINFER_SDIST={tmp_path / 'none.tar.gz'} does not exist "
                                       "(rerun tools/gpu_env.sh prepare)")
    finally:
        flashmla_setup.load.cache_clear()


def test_build_takes_flashmla_s_own_pinned_cutlass(tmp_path):
    # tools/gpu_env.sh prepare's tarball: the tree with its submodule's headers at csrc/cutlass/include;
    # FlashInfer's is not needed
    files = {s: "" for s in flashmla_setup.SOURCES} | {"csrc/cutlass/include/cutlass/cutlass.h": ""}
    mla = _tar(tmp_path / "flashmla-abc-cutlass-def.tar.gz", "flashmla-abc-cutlass-def", files)
    assert flashmla_setup.own_cutlass(mla)
    srcs, incs = flashmla_setup.sources(mla, None, tmp_path / "work")
    top = tmp_path / "work/flashmla-abc-cutlass-def"
    assert srcs == [str(top / s) for s in flashmla_setup.SOURCES]
    assert incs == [str(top / "csrc"), str(top / "csrc/cutlass/include")]


class _FlashMLA:
    """Stands in for flash_mla_cuda (this commit's csrc/flash_api.cpp contract), in torch."""

    def __init__(self):
        self.meta_calls = 0

    def get_mla_metadata(self, lens, heads_per_hk, hk):
        assert lens.dtype == torch.int32 and lens.is_contiguous() and hk == 1
        self.meta_calls += 1
        return torch.zeros(4, 8, dtype=torch.int32), torch.zeros(lens.shape[0] + 1, dtype=torch.int32)

    def fwd_kvcache_mla(self, q, kcache, v, lens, table, scale, causal, meta, splits):
        b, s, h, _ = q.shape
        assert (s == 1 and not causal and kcache.shape[2] == 1 and table.dtype == torch.int32
                and splits.shape == (b + 1,))
        assert int(lens.min()) >= 1, "the runtime hands FlashMLA no zero-length row"
        o, lse = torch.zeros(b, 1, h, v, dtype=q.dtype), torch.zeros(b, h, 1)
        for i in range(b):
            n = int(lens[i])
            k = kcache[table[i, :-(-n // kcache.shape[1])].long(), :, 0].flatten(0, 1)[:n].float()
            sc = q[i, 0].float() @ k.T * scale
            lse[i, :, 0] = torch.logsumexp(sc, -1)          # base e (splitkv_mla.cu: logf(L) + m / log2(e))
            o[i, 0] = (torch.softmax(sc, -1) @ k[:, :v]).to(o.dtype)
        return o, lse


def test_flashmla_rows_through_merge_equal_unsplit(monkeypatch):
    fake = _FlashMLA()
    monkeypatch.setattr(flashmla, "load", lambda: (fake, "stand-in"))
    lens, heads, page, scale = [1, 3, 64, 130], 4, 64, 0.05
    q, kv, want_o, want_lse = unsplit(lens, heads, scale)
    for c in (1, 2, 4):
        parts, calls = [], fake.meta_calls
        for r, view, lay in rank_shards(kv, lens, c, page):
            # a decode batch: the table sliced
            assert lay.rows_are_chunks
            res = flashmla.flashmla_decode(torch.cat([q, q[:1]]), view, lay, scale, 512)
            again = flashmla.flashmla_decode(torch.cat([q, q[:1]]), view, lay, scale, 512)   # the next layer
            gathered = flashmla.flashmla_decode(torch.cat([q, q[:1]]), view,
                                                dataclasses.replace(lay, rows_are_chunks=False,
                                                                    backend_state={}),
                                                scale, 512)                   # each row's table row gathered
            assert torch.equal(res.lse, again.lse) and res.base == "e"
            assert torch.equal(res.o, gathered.o) and torch.equal(res.lse, gathered.lse)
            assert torch.isneginf(res.lse[-1]).all()                           # the pad row
            empty = torch.tensor([n <= r for n in lens])                        # L < c leaves rank r empty
            assert torch.isneginf(res.lse[:len(lens)][empty]).all()
            parts.append((res.o[:len(lens)], res.lse[:len(lens)]))
        assert fake.meta_calls - calls == 2 * c               # once per batch (two layouts a rank), not per
                                                              # layer
        m = merge_stacked(torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts]), "e")
        assert torch.allclose(m.o, want_o, atol=1e-5) and torch.allclose(m.lse, want_lse, atol=1e-5), c
    assert not math.isnan(float(m.o.sum()))


def test_rule_context_is_the_same_on_every_rank():
    from dcpctl.runtime.attention.selector import group_context
    from dcpctl.runtime.attention.layout import SeqChunk
    from dcpctl.runtime.kv.allocator import local_len
    chunks = [SeqChunk(0, 16384, 1), SeqChunk(1, 99, 1)]       # a request of 16385 tokens and one of 100
    assert {local_len(16385, r, 2) for r in range(2)} == {8193, 8192}   # ranks' own max lengths differ by one
    assert (group_context(chunks, 2) == 8193 and group_context(chunks, 1) == 16385
            and group_context([], 4) == 0)


def _blocker(monkeypatch, name, why):
    from dcpctl.runtime.attention import backends
    monkeypatch.setattr(backends.get(backends.ABSORBED, name), "blocker", lambda q, pool, v: why)


def test_a_graph_capture_may_pick_flashmla_by_its_batch_and_bucket(tmp_path, monkeypatch):
    # a capture's layout carries no host page lists: FlashInfer is out (its plan() is per step, on the host),
    # FlashMLA is in (its metadata is a device kernel the graph replays), and the rule picks by the graph's
    # batch size and context bucket; an eager batch of the same shape picks by its chunks
    from types import SimpleNamespace
    from dcpctl.runtime.attention import selector
    from dcpctl.runtime.attention.layout import SeqChunk
    from dcpctl.runtime.attention.paged import GraphPass
    t = _table(tmp_path)
    monkeypatch.setattr(selector, "table_for", lambda device, sm, override=None: t)
    monkeypatch.setattr(selector, "_gpu", lambda device: ("NVIDIA H200", 90))
    for name in ("triton", "flashmla", "flashinfer"):       # the registry's blockers (attention/backends)
        _blocker(monkeypatch, name, None)
    pool = torch.zeros(4, 64, 576, dtype=torch.bfloat16)
    graph = lambda b, rows: SimpleNamespace(graph=GraphPass({}, True), max_local_len=rows, chunks=[])  # noqa
    assert selector._absorbed("auto", torch.zeros(64, 128, 576), pool, graph(64, 65536), 512, 1) == "flashmla"
    assert selector._absorbed("auto", torch.zeros(1, 128, 576), pool, graph(1, 65536), 512, 1) == "triton"
    eager = SimpleNamespace(graph=None, max_local_len=65536,
                            chunks=[SeqChunk(i, 65535, 1) for i in range(64)])
    assert selector._absorbed("auto", torch.zeros(64, 128, 576), pool, eager, 512, 1) == "flashmla"
    # FlashInfer stays out of a capture, with its reason, even where the table would pick it
    _blocker(monkeypatch, "flashmla", "not built")
    assert selector._absorbed("auto", torch.zeros(64, 128, 576), pool, graph(64, 65536), 512, 1) == "triton"
    assert selector._absorbed("auto", torch.zeros(64, 128, 576), pool, eager, 512, 1) == "flashinfer"


def test_flashmla_is_told_it_is_captured(monkeypatch):
    """A decode graph's batch through the registry: the capture's warm-up (recording False) makes the tile
    metadata into the buffers the graphs keep, the recording reads them with no metadata kernel, and `refresh`
    remakes them before a replay only when a row's block count changed; every pass equals an eager batch (no
    CUDA here: the backend is told it is captured, it asks torch nothing)."""
    from dcpctl.runtime.attention import backends
    from dcpctl.runtime.attention.paged import GraphPass
    fake = _FlashMLA()
    monkeypatch.setattr(flashmla, "load", lambda: (fake, "stand-in"))
    lens, scale = [5, 300, 64, 130], 0.05
    q, kv, _, _ = unsplit(lens, 4, scale)
    (_, view, lay), = rank_shards(kv.bfloat16(), lens, 1, 64, pad=0)
    b, kept = backends.get(backends.ABSORBED, "flashmla"), {}
    call = lambda lay: backends.Call(q.bfloat16(), view, lay, scale, 512, 0, 2, None, None, None)  # noqa: E731
    eager = backends.run(b, call(dataclasses.replace(lay, backend_state={})))
    made = []
    for recording in (False, True):
        res = backends.run(b,
                           call(dataclasses.replace(lay, backend_state={}, graph=GraphPass(kept, recording))))
        made.append(fake.meta_calls)
        assert torch.equal(res.o, eager.o) and torch.equal(res.lse, eager.lse), recording
    # eager 1, warm-up 1, recording 0
    assert made == [2, 2] and isinstance(kept["flashmla"], flashmla.GraphRows)
    remade = []
    # blocks: as made, same, 2 rows cross
    for step in ([5, 300, 64, 130], [6, 301, 64, 130], [6, 320, 65, 130]):
        before = fake.meta_calls
        b.refresh(kept, step, torch.tensor(step, dtype=torch.int32))
        remade.append(fake.meta_calls > before)
    assert remade == [True, False, True]       # the first refresh after a capture remakes (made from the
                                               # buffers)
