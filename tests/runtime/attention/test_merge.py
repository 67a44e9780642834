import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from dcpctl.runtime.attention.local import attention_mask, local_attention
from dcpctl.runtime.attention.merge import Partial, merge, merge_stacked


def _split_attention(q, kv, parts, scale, v_dim, bases):
    # split keys into len(parts) index sets, attend each, return list of Partial
    t = q.shape[0]
    out = []
    for idx, base in zip(parts, bases):
        mask = torch.ones(t, len(idx), dtype=torch.bool)
        o, lse = local_attention(q, kv[idx], mask, scale, v_dim, base)
        out.append(Partial(o, lse, base))
    return out


@settings(max_examples=60, deadline=None)
@given(t=st.integers(1, 4), h=st.integers(1, 3), s=st.integers(1, 12), shards=st.integers(1, 5),
       seed=st.integers(0, 1000), mixed=st.booleans())
def test_merge_equals_unsplit(t, h, s, shards, seed, mixed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(t, h, 6, generator=g, dtype=torch.float64)
    kv = torch.randn(s, 6, generator=g, dtype=torch.float64)
    full_o, full_lse = local_attention(q, kv, torch.ones(t, s, dtype=torch.bool), 0.3, 4)
    parts = [torch.arange(s)[r::shards] for r in range(shards)]  # strided, may be empty
    bases = ["2" if mixed and r % 2 else "e" for r in range(shards)]
    m = merge(_split_attention(q, kv, parts, 0.3, 4, bases))
    assert m.o.dtype == torch.float64 and m.base == "e"
    torch.testing.assert_close(m.o, full_o, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(m.lse, full_lse, atol=1e-12, rtol=1e-12)


def test_empty_shard_with_nan_output_is_ignored():
    o = torch.randn(3, 2, 5, 4)
    lse = torch.randn(3, 2, 5)
    o[1] = float("nan")
    lse[1] = -torch.inf
    got = merge_stacked(o, lse, "e")
    want = merge_stacked(o[[0, 2]], lse[[0, 2]], "e")
    assert torch.isfinite(got.o).all()
    torch.testing.assert_close(got.o, want.o)
    torch.testing.assert_close(got.lse, want.lse)


def test_all_empty_gives_zeros():
    o = torch.full((2, 3, 4), float("nan"), dtype=torch.bfloat16)
    lse = torch.full((2, 3), -torch.inf)
    got = merge_stacked(o, lse, "2")
    assert got.o.dtype == torch.float32
    assert torch.equal(got.o, torch.zeros(3, 4)) and torch.isneginf(got.lse).all()


def test_base_two_conversion():
    o = torch.randn(2, 1, 3, dtype=torch.float64)
    lse_e = torch.tensor([[0.5], [1.5]], dtype=torch.float64)
    a = merge_stacked(o, lse_e, "e")
    b = merge_stacked(o, lse_e / math.log(2.0), "2")
    torch.testing.assert_close(a.o, b.o)
    torch.testing.assert_close(a.lse, b.lse)
    with pytest.raises(ValueError, match="unknown LSE base '10'"):
        merge_stacked(o, lse_e, "10")


def test_causal_mask_by_global_position_and_sequence():
    m = attention_mask(torch.tensor([2, 0]), torch.tensor([0, 1]),
                       torch.tensor([0, 2, 4, 0]), torch.tensor([0, 0, 0, 1]))
    assert m.tolist() == [[True, True, False, False], [False, False, False, True]]
