"""Engine on forked gloo ranks with a small fake MLA model: every layout must equal DCP = 1."""
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from dcpctl.runtime.engine import Engine
from dcpctl.runtime.kv import local_len
from dcpctl.runtime.parallel import ParallelState
from tests.dist import run_ranks
from tests.runtime.configs import config

V, D, H, L, ROPE, LAYERS = 40, 16, 4, 6, 2, 2


class FakeMLA:
    """Random absorbed-MLA stand-in: q [T, Hl, R] and latent rows [T, R] from the hidden state."""

    def __init__(self, ps: ParallelState, replicate_q: bool, dtype=torch.float64, seed: int = 3):
        self.cfg = SimpleNamespace(num_layers=LAYERS, kv_lora_rank=L, qk_rope_head_dim=ROPE)
        self.kv_layers, self.kda_pool = LAYERS, None
        g = torch.Generator().manual_seed(seed)
        r = lambda *s: (torch.randn(*s, generator=g, dtype=torch.float64) / s[-2] ** 0.5).to(dtype)  # noqa
        self.emb, self.head = r(V, 1, D)[:, 0] * 4, r(D, V)
        self.wq, self.wkv, self.wo = r(LAYERS, D, H, L + ROPE), r(LAYERS, D, L + ROPE), r(LAYERS, H, L, D)
        self.ps, self.replicate_q = ps, replicate_q
        hl, c = H // ps.attn_tp.size, ps.dcp.size
        self.mine = slice(ps.attn_tp.rank * hl, (ps.attn_tp.rank + 1) * hl)
        first = ps.attn_tp.rank // c * c * hl
        self.group = slice(first, first + c * hl) if replicate_q else self.mine

    def forward(self, ids, positions, ctx):
        x = self.emb[ids]
        rope = torch.sin(positions.to(x.dtype)[:, None] * torch.tensor([0.3, 1.1], dtype=x.dtype))
        for layer in range(LAYERS):
            q = torch.einsum("td,dhr->thr", x, self.wq[layer][:, self.group])
            kv = x @ self.wkv[layer]
            kv = torch.cat([kv[:, :L], kv[:, L:] + rope], -1)
            o = ctx.attend(layer, q, kv, 0.5, q_is_group=self.replicate_q)
            out = torch.einsum("thl,hld->td", o, self.wo[layer][self.mine])
            if self.ps.attn_tp.group is not None:
                dist.all_reduce(out, group=self.ps.attn_tp.group)
            x = x + torch.tanh(out)
        return x

    def logits(self, hidden):
        return hidden @ self.head


def launch_cfg(world: int, dcp: int, dp: int = 1, backend: str = "ag_rs", rep_q: bool = False,
               capacity: int = 16, chunk: int = 5, lse_base: str = "e") -> dict:
    attn_tp = world // dp
    blocks = lambda n: [list(range(i, i + n)) for i in range(0, world, n)]  # noqa: E731
    return {"version": 1, "model": {"path": "", "dtype": "float64"}, "device": "cpu", "dist_backend": "gloo",
            "world_size": world,
            "topology": {"tp_size": world, "attn_tp_size": attn_tp, "attn_dp_size": dp, "dcp_size": dcp,
                         "ep_size": world, "pp_size": 1},
            "groups": {"tp": blocks(world), "attn_tp": blocks(attn_tp), "attn_dp": blocks(attn_tp),
                       "dcp": blocks(dcp), "ep": blocks(world)},
            "decisions": {"dcp_comm_backend": backend, "dcp_replicate_q_proj": rep_q, "lse_base": lse_base},
            "kv": {"page_size": 2, "capacity_tokens": capacity, "chunked_prefill_size": chunk}}


REQUESTS = [  # prompt lengths: shorter than dcp, equal to dcp 4, longer than a prefill chunk (5)
    {"prompt_ids": [5], "max_new_tokens": 4, "logprobs": True},
    {"prompt_ids": [1, 2, 3, 4], "max_new_tokens": 6, "logprobs": True},
    {"prompt_ids": [7, 3, 9, 1, 2, 8, 8, 6, 5, 4, 3], "max_new_tokens": 3, "logprobs": True},
    {"prompt_ids": [2, 9, 4], "max_new_tokens": 5, "temperature": 0.8, "top_k": 10, "top_p": 0.9,
     "seed": 11, "logprobs": True},
]


def _run(rank, world, cfg, requests):
    ps = (ParallelState.build(cfg["groups"], cfg["topology"]["attn_dp_size"])
          if world > 1 else ParallelState.single())
    model = FakeMLA(ps, cfg["decisions"]["dcp_replicate_q_proj"])
    return Engine(model, ps, config(cfg)).generate(requests)


@pytest.fixture(scope="module")
def reference():
    return run_ranks(_run, 1, launch_cfg(1, 1), REQUESTS)[0]


CASES = [  # (world, dcp, attn_dp, backend, replicated q, lse base)
    (2, 2, 1, "ag_rs", False, "e"),
    (2, 2, 1, "a2a", True, "2"),
    (4, 4, 1, "a2a", False, "e"),
    (4, 4, 1, "ag_rs", True, "2"),
    (4, 2, 1, "a2a", False, "e"),      # attn_tp 4 holds two DCP groups
    (4, 2, 2, "ag_rs", False, "e"),    # attention DP: two replicas of DCP 2
    (2, 1, 2, "ag_rs", False, "e"),    # attention DP without DCP
]


@pytest.mark.parametrize("world,dcp,dp,backend,rep_q,base", CASES)
def test_engine_matches_dcp1(reference, world, dcp, dp, backend, rep_q, base):
    cfg = launch_cfg(world, dcp, dp, backend, rep_q, capacity=16 // dcp + 2, lse_base=base)
    results = run_ranks(_run, world, cfg, REQUESTS)
    assert all(r == results[0] for r in results[1:])
    got = results[0]
    for want, out in zip(reference["outputs"], got["outputs"]):
        assert out["output_ids"] == want["output_ids"]
        assert out["output_logprobs"] == pytest.approx(want["output_logprobs"], abs=1e-9)
    assert got["stats"]["kv_rows_per_rank"] == _expected_rows(got["outputs"], world, dcp, dp)


def _expected_rows(outputs, world, dcp, dp):
    rows = []
    for rank in range(world):
        replica, dcp_rank = rank // (world // dp), rank % dcp
        lens = [len(o["prompt_ids"]) + len(o["output_ids"]) - 1
                for i, o in enumerate(outputs) if i % dp == replica]
        rows.append(sum(local_len(n, dcp_rank, dcp) for n in lens))
    return rows


def test_reference_shape_and_admission_queueing(reference):
    outs = reference["outputs"]
    assert [len(o["output_ids"]) for o in outs] == [4, 6, 3, 5]
    assert all(len(o["output_logprobs"]) == len(o["output_ids"]) for o in outs)
    assert reference["stats"]["kv_rows_per_rank"] == _expected_rows(outs, 1, 1, 1)


def test_eos_stops_and_too_long_request_is_rejected():
    ref = run_ranks(_run, 1, launch_cfg(1, 1), REQUESTS[:1])[0]["outputs"][0]["output_ids"]

    def eos_run(rank, world):
        model = FakeMLA(ParallelState.single(), False)
        return (Engine(model, ParallelState.single(), config(launch_cfg(1, 1), eos=ref[1]))
                .generate(REQUESTS[:1]))

    assert run_ranks(eos_run, 1)[0]["outputs"][0]["output_ids"] == ref[:2]
    with pytest.raises(RuntimeError,
                       match=r"prompt \(11 tokens\) \+ max_new_tokens \(3\) - 1 = 13 KV rows exceeds the KV "
                             r"capacity \(8 "):
        run_ranks(_run, 1, launch_cfg(1, 1, capacity=8), REQUESTS[2:3])


def test_replica_without_requests_still_steps(reference):
    got = run_ranks(_run, 4, launch_cfg(4, 2, dp=2, backend="a2a", capacity=10), REQUESTS[:1])[0]
    assert (got["outputs"][0]
            == reference["outputs"][0] | {"output_logprobs": got["outputs"][0]["output_logprobs"]})
    assert got["outputs"][0]["output_logprobs"] == pytest.approx(reference["outputs"][0]["output_logprobs"],
                                                                 abs=1e-9)
    assert got["stats"]["kv_rows_per_rank"] == [2, 2, 0, 0]
