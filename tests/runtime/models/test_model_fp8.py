"""Block-wise fp8 checkpoints (DeepSeek-V3 / Kimi K2 layout): per-shard dequantization at load.

The tiny model gets dims that are not multiples of the 16x16 test block and TP shards that cut
through blocks; it is quantized here the way DeepSeek's releases are (per block: scale = amax/448,
fp8 = w / scale, `weight_scale_inv` = scale), leaving embeddings, lm_head and the router unquantized.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from dcpctl.runtime.models import ModelLoadError, load_model
from dcpctl.runtime.models.checkpoint import Checkpoint, Want
from dcpctl.runtime.models.quant import BlockFp8
from dcpctl.runtime.parallel import ParallelState
from dcpctl.runtime.tiny import write_tiny_model
from tests.dist import run_ranks
from tests.runtime.configs import typed
from tests.runtime.ref_context import RefContext, greedy_run
from tests.runtime.models.test_model_load import fake_state
from tests.runtime.models.test_model_parallel import make_groups

BLOCK = (16, 16)
FP8_MAX = 448.0  # largest finite float8_e4m3fn
PROMPTS = [[256, 72, 101, 108, 108, 111, 33], [256, 5, 9]]
STEPS = 2
# hidden 72, q/kv lora 40: not multiples of 16; TP 4 cuts q_b rows (2 heads * 20), o_proj columns
# (2 * 12), dense rows (24) and expert rows (6) through blocks
SHAPE = dict(hidden_size=72, intermediate_size=96, moe_intermediate_size=24, q_lora_rank=40, kv_lora_rank=40,
             qk_nope_head_dim=12, qk_rope_head_dim=8, v_head_dim=12, num_hidden_layers=2)
QUANT = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
         "weight_block_size": list(BLOCK)}


def quantized(name: str, shape: tuple[int, ...]) -> bool:
    return len(shape) == 2 and "embed_tokens" not in name and "lm_head" not in name \
        and not name.endswith("mlp.gate.weight")


def quantize(w: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    # w: [out, in] -> fp8 [out, in], scale_inv [ceil(out/b0), ceil(in/b1)] fp32
    (out, inn), (b0, b1) = w.shape, block
    n0, n1 = -(-out // b0), -(-inn // b1)
    padded = torch.zeros(n0 * b0, n1 * b1)
    padded[:out, :inn] = w
    blocks = padded.view(n0, b0, n1, b1)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / FP8_MAX
    q = (blocks / scale[:, None, :, None]).view(n0 * b0, n1 * b1)[:out, :inn]
    return q.to(torch.float8_e4m3fn).contiguous(), scale.float()


def reference_dequant(q: torch.Tensor, scale: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    # q: [out, in] fp8  scale: [n0, n1] -> [out, in] fp32, element (i, j) times scale[i // b0, j // b1]
    rows = torch.arange(q.shape[0]) // block[0]
    cols = torch.arange(q.shape[1]) // block[1]
    return q.float() * scale[rows][:, cols]


def _tensors(path):
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def write_fp8(src, dst, block=BLOCK, drop_scale: str | None = None, **config):
    """Copy the tiny checkpoint at src to dst with its linear weights block-quantized."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "model.safetensors":
            (dst / f.name).write_bytes(f.read_bytes())
    out = {}
    for name, w in _tensors(src).items():
        if quantized(name, tuple(w.shape)):
            out[name], out[name + "_scale_inv"] = quantize(w, block)
        else:
            out[name] = w
    out.pop(drop_scale, None)
    save_file(out, str(dst / "model.safetensors"))
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(quantization_config={**QUANT, "weight_block_size": list(block)}, **config)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("dense"), **SHAPE)


@pytest.fixture(scope="module")
def fp8(dense, tmp_path_factory):
    return write_fp8(dense, tmp_path_factory.mktemp("fp8") / "ckpt")


@pytest.fixture(scope="module")
def expected(fp8):
    """name -> reference dequantization (float32) of every quantized weight."""
    t = _tensors(fp8)
    return {n: reference_dequant(t[n], t[n + "_scale_inv"], BLOCK) for n in t if n + "_scale_inv" in t}


def test_checkpoint_slices_through_blocks_equal_reference(fp8, expected):
    # every quantized weight, whole and in slices that start and end inside blocks, on both dims
    ckpt = Checkpoint(fp8, BlockFp8(BLOCK))
    for name, ref in expected.items():
        out, inn = ref.shape
        wants = [Want(name, (out, inn)), Want(name, (out, inn), 0, 3, out - 5),
                 Want(name, (out, inn), 1, 7, 7 + 10)]
        for w in wants:
            got = ckpt.read([w], torch.float64, "cpu")[name]
            want = ref if w.dim is None else ref.narrow(w.dim, w.start, w.end - w.start)
            assert got.dtype == torch.float64
            torch.testing.assert_close(got, want.double(), rtol=0, atol=0)


@pytest.mark.parametrize("rank", range(4))
def test_tp4_rank_shards_equal_reference(fp8, expected, rank):
    m = load_model(fp8, fake_state(tp=4, rank=rank), False, torch.float64)
    attn, a = m.layers[0].attn, "model.layers.0.self_attn."
    def exact(got, name, rows=(None,), cols=(None,)):
        torch.testing.assert_close(got, expected[name][slice(*rows), slice(*cols)].double(), rtol=0, atol=0)

    exact(attn.q_b, a + "q_b_proj.weight", (rank * 40, rank * 40 + 40))
    exact(attn.q_a, a + "q_a_proj.weight")
    exact(attn.kv_a, a + "kv_a_proj_with_mqa.weight")
    exact(attn.o_proj, a + "o_proj.weight", (None,), (rank * 24, rank * 24 + 24))
    kv_b = expected[a + "kv_b_proj.weight"].view(8, 24, 40)[2 * rank:2 * rank + 2].double()
    torch.testing.assert_close(attn.w_kc, kv_b[:, :12], rtol=0, atol=0)
    exact(m.layers[0].mlp.down, "model.layers.0.mlp.down_proj.weight", (None,), (rank * 24, rank * 24 + 24))
    moe, e = m.layers[1].mlp, "model.layers.1.mlp."
    exact(moe.experts[5].gate, e + "experts.5.gate_proj.weight", (rank * 6, rank * 6 + 6))
    exact(moe.shared.up, e + "shared_experts.up_proj.weight", (rank * 6, rank * 6 + 6))
    # unquantized tensors keep their stored values
    assert moe.router.weight.dtype == torch.float64 and m.embed.shape == (66, 72)


def test_replicated_q_dequantizes_the_group_rows(fp8, expected):
    m = load_model(fp8, fake_state(tp=4, rank=3, dcp=2), True, torch.float64)
    q_b = expected["model.layers.1.self_attn.q_b_proj.weight"][2 * 40:4 * 40].double()
    assert m.layers[1].attn.q_is_group
    torch.testing.assert_close(m.layers[1].attn.q_b, q_b, rtol=0, atol=0)


def test_fp8_logits_close_to_unquantized(tmp_path):
    # e4m3 keeps 4 significant bits: each weight matrix is ~2.7% off (relative L2), and the logits of
    # this 2-layer model 4-9% per position (measured over 3 seeds). Dense layers only: with MoE a
    # near-tied router can pick another expert for a token and move its logits by ~60%.
    dense = write_tiny_model(tmp_path / "dense", **SHAPE, n_routed_experts=0)
    fp8 = write_fp8(dense, tmp_path / "fp8")
    pre8, _, _ = greedy_run(load_model(fp8, ParallelState.single(), False, torch.float64), PROMPTS, STEPS)
    pre, _, _ = greedy_run(load_model(dense, ParallelState.single(), False, torch.float64), PROMPTS, STEPS)
    for a, b in zip(pre8, pre):
        assert ((a - b).norm(dim=-1) / b.norm(dim=-1)).max() < 0.12
        assert (a - b).abs().max() < 0.1 * b.abs().max()


def _rank(rank: int, world: int, path: str, groups: dict, decisions: dict):
    ps = ParallelState.build(groups, attn_dp_size=1)
    model = load_model(path, ps, typed(decisions).dcp_replicate_q_proj, torch.float64)
    return greedy_run(model, PROMPTS, STEPS, RefContext(model.cfg.kv_lora_rank, ps.dcp.rank, ps.dcp.size))


@pytest.mark.parametrize("tp,dcp", [(2, 1), (4, 1), (4, 2)])
def test_tp_sharding_does_not_change_fp8_logits(fp8, tp, dcp):
    single = greedy_run(load_model(fp8, ParallelState.single(), False, torch.float64), PROMPTS, STEPS)
    decisions = {"dcp_replicate_q_proj": dcp > 1}
    for pre, dec, outs in run_ranks(_rank, tp, str(fp8), make_groups(tp, dcp=dcp), decisions):
        assert outs == single[2]
        for a, b in zip(pre + dec, single[0] + single[1]):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_unsupported_method_names_it(dense, tmp_path):
    dst = write_fp8(dense, tmp_path / "awq")
    cfg = json.loads((dst / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "awq", "bits": 4}
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="quant_method 'awq' is not"):
        load_model(dst, ParallelState.single(), False, torch.float32)
    cfg["quantization_config"] = {"quant_method": "fp8"}
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="'fp8' has no weight_block_size"):
        load_model(dst, ParallelState.single(), False, torch.float32)
    del cfg["quantization_config"]
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError,
                       match=r"is stored as fp8 \(F8_E4M3\) but config.json has no quantization"):
        load_model(dst, ParallelState.single(), False, torch.float32)


def test_missing_or_misshapen_scale_names_the_tensor(dense, tmp_path):
    name = "model.layers.1.mlp.experts.3.down_proj.weight"
    dst = write_fp8(dense, tmp_path / "noscale", drop_scale=name + "_scale_inv")
    with pytest.raises(ModelLoadError,
                       match=f"tensor {name} is fp8 but its scale {name}_scale_inv is not in"):
        load_model(dst, ParallelState.single(), False, torch.float32)
    dst = write_fp8(dense, tmp_path / "block", block=(16, 8))
    cfg = json.loads((dst / "config.json").read_text())
    cfg["quantization_config"]["weight_block_size"] = [16, 16]  # config disagrees with the stored scales
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError,
                       match=r"_scale_inv in model.safetensors has shape \[\d+, \d+\], expected"):
        load_model(dst, ParallelState.single(), False, torch.float32)


def test_other_block_size_and_bf16(dense, tmp_path):
    # a non-square block that divides nothing; bf16 runs dequantize then cast
    dst = write_fp8(dense, tmp_path / "b", block=(24, 40))
    t = _tensors(dst)
    name = "model.layers.0.self_attn.o_proj.weight"
    ref = reference_dequant(t[name], t[name + "_scale_inv"], (24, 40))
    m = load_model(dst, fake_state(tp=2, rank=1), False, torch.bfloat16)
    torch.testing.assert_close(m.layers[0].attn.o_proj, ref[:, 48:].bfloat16(), rtol=0, atol=0)


def test_generate_cli_on_fp8_checkpoint(fp8):
    # the real launch (torchrun, TP 2 x DCP 2, gloo) produces the single-rank greedy ids
    cmd = [sys.executable, "-m", "dcpctl.cli.main", "generate", "--model-path", str(fp8), "--hardware", "cpu",
           "--tp-size", "2", "--dcp-size", "2", "--dtype", "float64", "--temperature", "0",
           "--max-new-tokens", "4", "--format", "json"]
    cmd += [a for p in PROMPTS for a in ("--prompt-ids", ",".join(map(str, p)))]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    _, _, want = greedy_run(load_model(fp8, ParallelState.single(), False, torch.float64), PROMPTS, 4)
    assert [o["output_ids"] for o in json.loads(p.stdout)["outputs"]] == want


def test_scales_in_another_file_of_an_index(fp8, tmp_path):
    # weights in one file, every weight_scale_inv in another, tied together by the index
    dst = tmp_path / "split"
    dst.mkdir()
    for f in fp8.iterdir():
        if f.name != "model.safetensors":
            (dst / f.name).write_bytes(f.read_bytes())
    t = _tensors(fp8)
    parts = {"a.safetensors": {n: v for n, v in t.items() if not n.endswith("_scale_inv")},
             "b.safetensors": {n: v for n, v in t.items() if n.endswith("_scale_inv")}}
    for file, part in parts.items():
        save_file(part, str(dst / file))
    (dst / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {n: file for file, part in parts.items() for n in part}}))
    a, _, _ = greedy_run(load_model(dst, fake_state(tp=1, rank=0), False, torch.float64), PROMPTS, 1)
    b, _, _ = greedy_run(load_model(fp8, ParallelState.single(), False, torch.float64), PROMPTS, 1)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
