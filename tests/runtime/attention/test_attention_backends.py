"""The local attention backends on CPU: the measured rule, FlashInfer's setup and its plan through the merge.

FlashInfer itself needs a GPU (tests/runtime/attention/test_gpu_backends.py); here a stand-in wrapper computes
what FlashInfer's MLA decode computes from the very plan arguments the runtime hands it (indptrs, page
indices, lengths, strided ckv/kpe views), so the plan, the empty-shard rule and the base-2 LSE are checked
against unsplit attention at DCP 1, 2 and 4 without one.
"""
import io
import json
import math
import sys
import tarfile
import types

import pytest
import torch

from dcpctl.bench.kernel_table import table_from_bench, write
from dcpctl.plan.attention_table import Key, decide, load_table, table_for
from dcpctl.plan.errors import UserError
from dcpctl.runtime.attention import flashinfer_mla, flashinfer_setup
from dcpctl.runtime.attention.layout import SeqChunk
from dcpctl.runtime.attention.merge import merge_stacked
from dcpctl.runtime.attention.paged import build_paged, paged_attention
from dcpctl.runtime.kv import KVPool, VirtualAllocator
from tests.runtime.shards import rank_shards, unsplit

H200 = Key(128, "bf16", 64, "NVIDIA H200")
BOTH = {"triton": None, "flashinfer": None}


def test_shipped_table_picks_per_cell():
    rule = decide(Key(16, "bf16", 64, "NVIDIA H200"), "auto", BOTH, table_for("NVIDIA H200", 90))
    assert rule.fixed is None and rule.pick(64, 128 * 1024) == "flashinfer"
    cells = {(b, c): w for b, c, w in rule.cells}
    assert len(cells) == 28 and rule.pick(1, 32 * 1024) == cells[(1, 32768)] == "triton"
    assert rule.pick(40, 100_000) == cells[(32, 131072)]          # nearest in log batch + log ctx
    assert rule.summary().startswith("flashinfer (triton at B=1") and "measured" in rule.reason


def test_the_device_rule_for_the_attention_table():
    h200 = table_for("NVIDIA H200", 90)
    assert len(h200["cells"]) == 84 and h200["source"].startswith("the attention tuning table: measured on "
                                                                  "this GPU")
    assert table_for("NVIDIA H100 80GB HBM3", 90)["cells"] == h200["cells"]        # the nearest sm_90 table
    assert table_for("NVIDIA B200", 100)["cells"] == []                            # none: ours, said so
    rule = decide(Key(128, "bf16", 64, "NVIDIA B200"), "auto", BOTH, table_for("NVIDIA B200", 100))
    assert (rule.fixed == "triton"
            and "no attention table for NVIDIA B200 or another sm_100 GPU" in rule.reason)


def test_rule_requests_and_fallbacks():
    t = table_for("NVIDIA H200", 90)
    assert decide(H200, "triton", BOTH, t).fixed == "triton"
    assert decide(H200, "torch_native", BOTH, t).fixed == "torch"
    gone = decide(H200, "flashinfer", {"triton": None, "flashinfer": "FlashInfer is not installed"}, t)
    assert gone.fixed == "triton" and "asked for, but FlashInfer is not installed" in gone.reason
    only = decide(H200, "auto", {"triton": None, "flashinfer": "no"}, t)
    assert only.fixed == "triton" and "not available: flashinfer: no" in only.reason
    other = decide(Key(128, "bf16", 16, "NVIDIA H200"), "fa3", BOTH, t)
    assert other.fixed == "triton" and other.reason.startswith("--attention-backend fa3 is not a "
                                                               "bundled-runtime")
    assert "no measured cell for 128 kernel heads, bf16 KV, page 16" in other.reason
    assert decide(H200, "auto", {"triton": "x", "flashinfer": "y"}, t).fixed == "torch"


def test_table_round_trip(tmp_path):
    res = {"device": "NVIDIA H200", "kv_dtype": "bf16", "torch": "t", "cells": [
        {"heads": 16, "ctx": 8192, "batch": 1,
         "backends": {"triton": {"time_us": 10.0}, "flashinfer": {"time_us": 12.0}}},
        {"heads": 16, "ctx": 8192, "batch": 64,
         "backends": {"triton": {"time_us": 90.0}, "flashinfer": {"time_us": 60.0}}}]}
    path = tmp_path / "t.json"
    write(table_from_bench(res, "dcpctl bench kernel --save-table t.json"), path)
    rule = decide(Key(16, "bf16", 64, "h200"), "auto", BOTH, load_table(path))
    assert (rule.pick(1, 8192), rule.pick(48, 8192)) == ("triton", "flashinfer")
    assert rule.summary() == "triton (flashinfer at B=64 ctx=8K)"
    (tmp_path / "empty.json").write_text("{}")
    with pytest.raises(UserError, match="not a table"):
        load_table(tmp_path / "empty.json")
    with pytest.raises(UserError, match="not a table"):
        load_table(tmp_path / "missing.json")


def test_plan_and_launch_carry_the_choice(tmp_path):
    from click.testing import CliRunner
    from dcpctl.cli.main import cli
    r = CliRunner().invoke(cli,
                           ["plan", "--model-preset", "deepseek-v3", "--hardware", "h200-8", "--tp-size", "8",
                            "--dcp-size", "8", "--page-size", "64", "--attention-backend", "triton",
                            "--format", "json"])
    d = json.loads(r.stdout)["decisions"]["local_attention_backend"]
    assert d["value"] == "triton" and "128 kernel heads, bf16 KV, page 64 on NVIDIA H200" in d["reason"]
    cpu = CliRunner().invoke(cli, ["plan", "--hardware", "cpu", "--tp-size", "2", "--format", "json"])
    assert json.loads(cpu.stdout)["decisions"]["local_attention_backend"]["value"] == "torch"


def _fake_sdist(tmp_path, version):
    buf = tmp_path / "flashinfer_python-9.tar.gz"
    with tarfile.open(buf, "w:gz") as tf:
        for name, text in {"flashinfer/__init__.py": f"__version__ = '{version}'\n", "csrc/x.cu": ""}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"flashinfer_python-9/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf


@pytest.mark.parametrize("version, ok", [("0.2.14", True), ("0.4.0", False)])
def test_sdist_route(tmp_path, monkeypatch, version, ok):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "flashinfer", raising=False)
    monkeypatch.setenv("DCPCTL_FLASHINFER_SDIST", str(_fake_sdist(tmp_path, version)))
    monkeypatch.setenv("DCPCTL_FLASHINFER_WORK", str(tmp_path / "work"))
    for k in ("TORCH_CUDA_ARCH_LIST", "FLASHINFER_WORKSPACE_BASE", "MAX_JOBS", "PATH", "CUDA_HOME"):
        monkeypatch.setenv(k, "") if k == "PATH" else monkeypatch.delenv(k, raising=False)
    flashinfer_setup.load.cache_clear()
    try:
        fi, why = flashinfer_setup.load()
        assert (fi is not None) == ok, why
        assert why == ("FlashInfer 0.2.14 from the sdist flashinfer_python-9.tar.gz" if ok else
                       "FlashInfer 0.4.0 is outside the tested range [0.2.14, 0.3.0)")
        assert (tmp_path / "work/flashinfer_python-9/flashinfer/data/csrc").is_symlink()
    finally:
        flashinfer_setup.load.cache_clear()
        sys.modules.pop("flashinfer", None)


def test_not_installed_says_how(monkeypatch):
    monkeypatch.delenv("DCPCTL_FLASHINFER_SDIST", raising=False)
    flashinfer_setup.load.cache_clear()
    try:
        fi, why = flashinfer_setup.load()
        assert fi is None and why.startswith("FlashInfer is not installed (pip install 'dcpctl[flashinfer]'")
    finally:
        flashinfer_setup.load.cache_clear()
    pool = torch.zeros(4, 64, 576, dtype=torch.bfloat16)
    assert flashinfer_mla.blocker(pool, 512, torch.bfloat16) == "the KV pool is not on a GPU"


class _Wrapper:
    """Stands in for BatchMLAPagedAttentionWrapper: the same plan()/run() contract, in torch."""

    def __init__(self, ws, backend):
        self.plans = 0

    def plan(self, qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_heads, head_dim_ckv, head_dim_kpe,
             page_size, causal, sm_scale, q_data_type, kv_data_type):
        # no device sync
        assert qo_indptr.device.type == kv_indptr.device.type == kv_len_arr.device.type == "cpu"
        assert not causal and kv_indices.dtype == torch.int32
        self.indptr, self.indices, self.lens, self.page, self.scale = (kv_indptr, kv_indices, kv_len_arr,
                                                                       page_size, sm_scale)
        self.plans += 1

    def run(self, q_nope, q_pe, ckv, kpe, return_lse):
        o, lse = torch.zeros_like(q_nope), torch.zeros(q_nope.shape[:2])
        for i in range(q_nope.shape[0]):
            pages = self.indices[self.indptr[i]:self.indptr[i + 1]].long()
            n = int(self.lens[i])
            k = torch.cat([ckv[pages], kpe[pages]], -1).flatten(0, 1)[:n].float()
            s = torch.cat([q_nope[i], q_pe[i]], -1).float() @ k.T * self.scale
            lse[i] = torch.logsumexp(s, -1) / math.log(2)       # FlashInfer's lse is base 2
            o[i] = (torch.softmax(s, -1) @ k[:, :ckv.shape[-1]]).to(o.dtype)
        return o, lse


def test_flashinfer_plan_through_merge_equals_unsplit(monkeypatch):
    fake = types.SimpleNamespace(mla=types.SimpleNamespace(BatchMLAPagedAttentionWrapper=_Wrapper))
    monkeypatch.setattr(flashinfer_mla, "load", lambda: (fake, "stand-in"))
    monkeypatch.setattr(flashinfer_mla, "WORKSPACE_BYTES", 16)
    flashinfer_mla._planner.cache_clear()
    lens, heads, page, scale = [1, 3, 8, 13, 30], 4, 4, 0.1
    q, kv, want_o, want_lse = unsplit(lens, heads, scale)
    for c in (1, 2, 4):
        parts = []
        for r, view, lay in rank_shards(kv, lens, c, page):
            res = flashinfer_mla.flashinfer_decode(torch.cat([q, q[:1]]), view, lay, scale, 512)
            # next layer
            again = flashinfer_mla.flashinfer_decode(torch.cat([q, q[:1]]), view, lay, scale, 512)
            assert torch.equal(res.lse, again.lse) and res.base == "2"
            assert torch.isneginf(res.lse[-1]).all()                          # the pad row
            parts.append((res.o[:len(lens)], res.lse[:len(lens)]))
        m = merge_stacked(torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts]), "2")
        assert torch.allclose(m.o, want_o, atol=1e-5) and torch.allclose(m.lse, want_lse, atol=1e-5), c
    assert all(w.plans >= 1 for w in flashinfer_mla._planner(torch.device("cpu")).wrappers.values())
    flashinfer_mla._planner.cache_clear()


def test_cpu_paged_path_stays_on_the_reference():
    alloc = VirtualAllocator(64, 4, 1)
    alloc.allocate(0, 5)
    pool = KVPool(1, 68, 40, torch.float32)
    lay = build_paged(alloc, [SeqChunk(0, 4, 1)], 0, 4)
    paged_attention(torch.randn(1, 2, 40), pool.kv[0], lay, 0.1, 32, 0, 1, requested="flashinfer")
    assert lay.selected == "torch"


def test_bench_kernel_backends_option_and_table(capsys):
    from click.testing import CliRunner
    from dcpctl.bench import kernel
    from dcpctl.cli.main import cli
    r = CliRunner().invoke(cli, ["bench", "kernel", "--backends", "fa3"])
    assert r.exit_code == 2 and "--backends fa3: unknown ['fa3']; valid: auto, triton, flashinfer" in r.output
    cell = {"heads": 128, "ctx": 32768, "batch": 32, "roofline_us": 50.0, "bound": "memory",
            "best": "flashinfer", "auto": "triton", "auto_over_best": 0.25,
            "backends": {"triton": {"time_us": 100.0, "fraction": 0.5},
                         "flashinfer": {"time_us": 80.0, "fraction": 0.625}}}
    res = {"device": "NVIDIA H200", "kv_dtype": "bf16", "calibration": {"copy_tbps": 4.3, "bf16_tflops": 790},
           "bf16_sustained_tflops": 680, "fraction_min": 0.5, "fraction_median": 0.5,
           "backends": ["triton", "flashinfer"], "cells": [cell], "flashinfer": "FlashInfer 0.2.14",
           "exchange": "-"}
    kernel._table(res)
    out = capsys.readouterr().out
    assert "100.0" in out and "80.0" in out and "0.62" in out and "triton (+25.0%)" in out
