"""HiCache L2: outputs with the host tier equal outputs without it, across DCP sizes and page sizes.

A tiny device capacity and max_running 1 force every admission to offload held pages (D2H) and
every shared prefix to come back (H2D or a device copy); a small host tier forces host evictions.
Every transfer runs with torch.distributed collectives patched to raise.
"""
import pytest
import torch.distributed as dist

from dcpctl.runtime.engine import Engine
from dcpctl.contract.fields import LaunchConfigError
from dcpctl.runtime.kv import VirtualAllocator
from dcpctl.runtime.kv.host_tier import HostTier, local_rows, page_rows
from dcpctl.runtime.kv.prefix_cache import DEVICE, HOST, Entry, PrefixCache
from dcpctl.runtime.parallel import ParallelState
from tests.dist import run_ranks
from tests.runtime.configs import config
from tests.runtime.engine.test_engine import FakeMLA, launch_cfg

BASE = [7, 3, 9, 1, 2, 8, 8, 6, 5, 4, 3, 2]
REQUESTS = [  # shared prefixes, a repeated prompt, prompts shorter than dcp 4, a sampled one
    {"prompt_ids": BASE[:9], "max_new_tokens": 3, "logprobs": True},
    {"prompt_ids": BASE[:9] + [11], "max_new_tokens": 3, "logprobs": True},
    {"prompt_ids": [5], "max_new_tokens": 3, "logprobs": True},
    {"prompt_ids": BASE, "max_new_tokens": 2, "logprobs": True},
    {"prompt_ids": BASE[:9], "max_new_tokens": 3, "logprobs": True},
    {"prompt_ids": BASE[:3], "max_new_tokens": 4, "logprobs": True},
    {"prompt_ids": BASE[:9] + [11], "max_new_tokens": 3, "temperature": 0.8, "top_k": 10, "seed": 4,
     "logprobs": True},
    {"prompt_ids": BASE + [13, 14, 15], "max_new_tokens": 2, "logprobs": True},
]
MAX_KV = max(len(r["prompt_ids"]) + r["max_new_tokens"] - 1 for r in REQUESTS)
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor",
               "all_to_all_single", "broadcast", "send", "recv", "isend", "irecv", "barrier",
               "all_gather_object")


def _no_collectives(fn):
    def guarded(*args, **kwargs):
        saved = {n: getattr(dist, n) for n in COLLECTIVES}

        def boom(*a, _n="", **k):
            raise AssertionError("a torch.distributed collective ran inside a HiCache transfer")
        for n in COLLECTIVES:
            setattr(dist, n, boom)
        try:
            return fn(*args, **kwargs)
        finally:
            for n, f in saved.items():
                setattr(dist, n, f)
    return guarded


def _run(rank, world, cfg, max_running):
    for name in ("offload", "restore", "copy_device"):  # forked rank: patching the class is local
        setattr(HostTier, name, _no_collectives(getattr(HostTier, name)))
    ps = ParallelState.build(cfg["groups"], 1) if world > 1 else ParallelState.single()
    cfg["kv"]["max_running_requests"] = max_running
    engine = Engine(FakeMLA(ps, False), ps, config(cfg))
    out = engine.generate(REQUESTS)
    engine.check_drained()
    out["hicache"] = engine.hicache.stats() if engine.hicache else None
    return out


def _cfg(dcp, page, host_pages=None, spare=1):
    w = page * dcp  # spare: device pages beyond the largest request (0: every held page must move)
    cfg = launch_cfg(dcp, dcp, capacity=page * (-(-MAX_KV // w) + spare), chunk=4)
    cfg["kv"]["page_size"] = page
    if host_pages is not None:
        cfg["hicache"] = {"host_pages": host_pages}
    return cfg


@pytest.fixture(scope="module")
def reference():
    cfg = launch_cfg(1, 1, capacity=64, chunk=4)
    return run_ranks(_run, 1, cfg, None)[0]


@pytest.mark.parametrize("dcp,page,host_pages,spare", [(1, 1, 6, 1), (1, 2, 3, 1), (2, 1, 4, 1), (2, 2, 2, 0),
                                                       (4, 1, 3, 1), (4, 2, 1, 0)])
def test_hicache_matches_plain(reference, dcp, page, host_pages, spare):
    results = run_ranks(_run, dcp, _cfg(dcp, page, host_pages, spare), 1)
    assert all(r["outputs"] == results[0]["outputs"] for r in results[1:])
    for want, got in zip(reference["outputs"], results[0]["outputs"]):
        assert got["output_ids"] == want["output_ids"]
        assert got["output_logprobs"] == pytest.approx(want["output_logprobs"], abs=1e-9)
    stats = results[0]["hicache"]
    assert stats["hit_tokens"] > 0 and stats["d2h_pages"] > 0 and stats["h2d_pages"] > 0
    assert spare == 0 or stats["d2d_pages"] > 0  # a spare page keeps some prefix on the device
    assert all(r["hicache"] == stats for r in results)  # every rank took the same decisions


def test_zero_host_pages_is_a_device_only_prefix_cache(reference):
    got = run_ranks(_run, 2, _cfg(2, 1, 0), 1)[0]
    assert [o["output_ids"] for o in got["outputs"]] == [o["output_ids"] for o in reference["outputs"]]
    assert got["hicache"]["d2h_pages"] == 0 and got["hicache"]["host_entries"] == 0


def test_index_translation_keeps_owned_rows_only():
    assert local_rows([8, 9, 10, 11, 12, 13], 4, 1) == [2, 3]
    assert local_rows(list(range(8, 16)), 4, 3) == [2, 3]
    assert page_rows([1, 3], 2, 4, 0) == [2, 3, 6, 7]  # widened page g -> physical rows [g*P, (g+1)*P)
    assert page_rows([2], 1, 1, 0) == [2]


def test_prefix_cache_lru_evicts_leaves_first_and_drops_extensions():
    pc = PrefixCache(2)
    a, b, c = pc.keys([1, 2, 3, 4, 5, 6], 3)
    for i, k in enumerate((a, b, c)):
        pc.insert(k, Entry(HOST, i))
    pc.touch([a, b, c])
    assert pc.lru(HOST) == c and pc.lru(DEVICE) is None
    assert [e.page for e in pc.match([1, 2, 3, 4, 9, 9], 5)] == [0, 1]
    assert sorted(e.page for e in pc.drop(b)) == [1, 2] and len(pc) == 1


def test_allocator_held_pages_are_counted():
    a = VirtualAllocator(capacity_tokens=4, page_size=1, dcp=2)
    a.allocate(0, 6)
    a.free(0, keep={a.pages(0)[0]})
    assert (a.free_pages, a.held_pages) == (3, 1)
    a.check_integrity()
    a.release(0)
    assert (a.free_pages, a.held_pages) == (4, 0)


@pytest.mark.parametrize("extra,match", [
    ({"speculative": {"algorithm": "STANDALONE", "draft_model_path": "d", "num_draft_tokens": 2}},
     "speculative"),
    ({"disaggregation_mode": "decode"}, "PD decode")])
def test_refused_with_speculative_and_pd_decode(extra, match):
    with pytest.raises(LaunchConfigError, match=match):
        config(_cfg(1, 1, 4) | extra)
