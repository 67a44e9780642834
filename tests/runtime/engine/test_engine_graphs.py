"""The engine's decode-graph path (engine/model_runner.py, engine/decode_graphs.py) on CPU, where a replay
runs the captured step eagerly on the same static buffers: generate() with a cuda_graph section equals
generate() without, float64, token for token, at DCP 1 and 2 (both exchanges, replicated Q) and attention DP
2, with batches padded up to a captured size, batches larger than the largest size (eager, with a
note), requests joining and leaving between steps, and a sampled request."""
import pytest
import torch

from dcpctl.launch.cuda_graphs import cuda_graph_section, sglang_decode_sizes
from dcpctl.plan.errors import UserError
from dcpctl.runtime.engine import Engine
from dcpctl.runtime.parallel import ParallelState
from tests.dist import run_ranks
from tests.runtime.configs import config
from tests.runtime.engine.test_engine import launch_cfg

REQUESTS = [  # five requests of different lengths: the decode batch shrinks 5 -> 1 as they finish
    {"prompt_ids": [5], "max_new_tokens": 7, "logprobs": True},
    {"prompt_ids": [1, 2, 3, 4], "max_new_tokens": 3, "logprobs": True},
    {"prompt_ids": [7, 3, 9, 1, 2, 8, 8, 6, 5, 4, 3], "max_new_tokens": 5, "logprobs": True},
    {"prompt_ids": [2, 9, 4], "max_new_tokens": 6, "temperature": 0.8, "top_k": 10, "seed": 11,
     "logprobs": True},
    {"prompt_ids": [6, 6], "max_new_tokens": 2, "logprobs": True},
]


def _rank(rank, world, path, cfg, requests, sizes, eos=None):
    import dcpctl.runtime.engine.pipeline as pipe_mod
    from dcpctl.runtime.models import load_model
    ps = (ParallelState.build(cfg["groups"], cfg["topology"]["attn_dp_size"])
          if world > 1 else ParallelState.single())
    model = load_model(path, ps, cfg["decisions"]["dcp_replicate_q_proj"], torch.float64, "cpu")
    cfg = dict(cfg, model={"path": path, "dtype": "float64"},
               cuda_graph={"batch_sizes": sizes, "reason": "cuda graphs: test"})
    cfg["kv"]["max_running_requests"] = 4
    engine = Engine(model, ps, config(cfg, eos))
    engine.warm_up()
    replays, launch = [], pipe_mod.launch_sampling
    pipe_mod.launch_sampling = lambda both, seqs, rows: replays.append(-len(seqs)) or launch(both, seqs, rows)
    if engine.runner.graphs is not None:   # count replays: the test must exercise the graph path, not only
                                           # eager steps
        run = engine.runner.graphs.replay
        engine.runner.graphs.replay = lambda *a: replays.append(len(a[1])) or run(*a)
    out = engine.generate(requests)
    pipe_mod.launch_sampling = launch
    return out["outputs"], replays


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    from dcpctl.runtime.tiny import write_tiny_model
    return str(write_tiny_model(tmp_path_factory.mktemp("g") / "m", num_hidden_layers=2,
                                first_k_dense_replace=1))


CASES = [  # world, dcp, dp, backend, replicated Q
    (1, 1, 1, "ag_rs", False),
    (2, 2, 1, "a2a", False),
    (2, 2, 1, "ag_rs", True),
    (2, 1, 2, "a2a", False),
]


@pytest.mark.parametrize("world,dcp,dp,backend,rep_q", CASES)
def test_graph_steps_equal_eager_steps(path, world, dcp, dp, backend, rep_q):
    cfg = launch_cfg(world, dcp, dp, backend, rep_q, capacity=64, chunk=6)
    cfg["decisions"]["attention_path"] = "paged"     # the graphs' path; eager runs it too, so only graphs
                                                     # differ
    eager = run_ranks(_rank, world, path, cfg, REQUESTS, [])
    graph = run_ranks(_rank, world, path, cfg, REQUESTS, [1, 2, 3])   # 4 running: eager; 2 of 3: padded
    assert not eager[0][1] and graph[0][1], "the graph path never ran"
    assert max(n for r in graph for n in r[1]) <= 3
    _same(eager, graph)


def _same(eager, graph):
    for (eo, _), (go, _) in zip(eager, graph):
        for e, g in zip(eo, go):
            assert g["output_ids"] == e["output_ids"]
            torch.testing.assert_close(torch.tensor(g["output_logprobs"]), torch.tensor(e["output_logprobs"]),
                                       atol=1e-12, rtol=0)


GREEDY = [dict(r, temperature=0.0) for r in REQUESTS]


@pytest.mark.parametrize("world,dcp,dp,backend,rep_q", CASES[:2])
def test_pipelined_steps_equal_eager_steps_with_eos(path, world, dcp, dp, backend, rep_q):
    # all greedy: the next step is queued before the host reads the tokens (engine/pipeline.py); an EOS that
    # one request emits mid-stream ends it one step after it was scheduled again, and its spare row is dropped
    cfg = launch_cfg(world, dcp, dp, backend, rep_q, capacity=64, chunk=6)
    cfg["decisions"]["attention_path"] = "paged"
    first = run_ranks(_rank, world, path, cfg, GREEDY, [])[0][0]
    eos = first[0]["output_ids"][2]                      # request 0's third token
    eager = run_ranks(_rank, world, path, cfg, GREEDY, [], eos)
    graph = run_ranks(_rank, world, path, cfg, GREEDY, [1, 2, 4, 5], eos)
    assert any(n < 0 for n in graph[0][1]), "no step was pipelined"
    assert any(len(o["output_ids"]) < r["max_new_tokens"]
               for o, r in zip(eager[0][0], GREEDY)), "EOS never hit"
    _same(eager, graph)


def test_sglang_buckets():
    assert sglang_decode_sizes(64) == [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64]
    assert sglang_decode_sizes(20) == [1, 2, 4, 8, 12, 16, 20]
    assert sglang_decode_sizes(300)[-3:] == [272, 288, 300]


def test_cuda_graph_section_reasons():
    assert cuda_graph_section("cpu", False, None, None, 64)["batch_sizes"] == []
    off = cuda_graph_section("cuda", True, None, None, 64)
    assert off["batch_sizes"] == [] and "--disable-cuda-graph" in off["reason"]
    auto = cuda_graph_section("cuda", False, None, None, 8)
    assert auto["batch_sizes"] == [1, 2, 4, 8] and "max running requests (8)" in auto["reason"]
    assert cuda_graph_section("cuda", False, 16, None, 64)["batch_sizes"][-1] == 16
    assert cuda_graph_section("cuda", False, None, [4, 1, 4], 64)["batch_sizes"] == [1, 4]
    with pytest.raises(UserError, match="--cuda-graph-bs"):
        cuda_graph_section("cuda", False, 2, [4], 64)


def test_warm_up_lengths_cover_the_chunk_with_both_parities():
    from dcpctl.runtime.engine.warm_up import warm_up_lengths
    got = warm_up_lengths(2048)
    assert got == sorted(set(got)) and got[0] >= 1 and got[-1] == 2048
    assert {767, 768, 1016, 1023, 1024} <= set(got)
    assert any(m % 2 for m in got) and any(m % 16 == 0 for m in got) and any(m % 16 == 8 for m in got)
    assert all(b <= 1.5 * a + 8 for a, b in zip(got, got[1:]))     # no gap wider than the 2^k / 3*2^k ladder
    assert warm_up_lengths(100)[-1] == 100 and warm_up_lengths(1) == [1]


def test_gemm_log_notes_each_distinct_gemm_and_warms_it():
    # synthetic GEMMs through quant.linear and bmm_into while recording: one entry per distinct weight layout,
    # with the largest M it ran at; the bmm keeps the model's token-major views (a split of a wider row,
    # written into a slice of a wider buffer); a plain [B, M, K] bmm is not noted (its strides depend on M)
    import torch
    from dcpctl.runtime.kernels import gemm_warm
    from dcpctl.runtime.kernels.gemm_warm import warm_ms
    from dcpctl.runtime.models.quant import linear
    w = torch.randn(6, 4)
    with gemm_warm.recording() as log:
        for m in (3, 5):
            linear(torch.randn(m, 4), w)
            linear(torch.randn(m, 4), w.clone())                # same shape and strides: one entry
        x = torch.randn(7, 2, 5)[:, :, :3]                      # [T, H, K]: a split of a wider row
        out = torch.empty(7, 2, 8)[:, :, :4]
        wb = torch.randn(2, 3, 4)
        gemm_warm.bmm_into(x.transpose(0, 1), wb, out.transpose(0, 1))
        gemm_warm.bmm_into(torch.randn(2, 7, 3), wb, torch.empty(2, 7, 4))
    assert gemm_warm.LOG is None
    torch.testing.assert_close(out, torch.einsum("thk,hkn->thn", x, wb))
    assert len(log.linears) == 1 and len(log.bmms) == 1 and len(log) == 2
    assert log.warm([1, 5, 7, 16]) == 2 + 3                     # each up to the largest M it met: 5 and 7
    ms = warm_ms(8192)
    assert ms[:16] == list(range(1, 17)) and ms[-1] == 8192 and all(b - a <= 256 for a, b in zip(ms, ms[1:]))
    assert warm_ms(100)[-1] == 100


def test_phase_timers_time_each_graph_step_and_undo(path):
    # engine/phases.py (the step trace's and engine_overhead's host phases): one row per decode step, the
    # metadata, sampling and resolve phases timed (no cudaGraphLaunch off CUDA), the same tokens, nothing
    # patched (the runner is handed a clock) and the clock gone after undo
    import dcpctl.runtime.engine.pipeline as pipe_mod
    from dcpctl.runtime.engine.decode_graphs import DecodeGraphs
    from dcpctl.runtime.engine.phases import PHASES, PhaseTimers
    from dcpctl.runtime.engine.request import SamplingParams
    from dcpctl.runtime.models import load_model
    ps = ParallelState.single()
    model = load_model(path, ps, False, torch.float64, "cpu")
    cfg = dict(launch_cfg(1, 1), model={"path": path, "dtype": "float64"},
               cuda_graph={"batch_sizes": [1, 2], "reason": "test"})
    want = Engine(model, ps, config(cfg)).generate([{"prompt_ids": [5, 3, 9],
                                                     "max_new_tokens": 6}])["outputs"][0]
    engine = Engine(model, ps, config(cfg))
    engine.warm_up()
    patchable = lambda: (DecodeGraphs.prepare, pipe_mod.launch_sampling, pipe_mod.Pipeline.read,  # noqa: E731
                         torch.cuda.CUDAGraph.replay, vars(engine.runner.graphs).get("prepare"))
    before = patchable()
    timers = PhaseTimers(engine.runner)
    assert timers.on and engine.runner.clock is timers and patchable() == before
    engine.submit(0, [5, 3, 9], SamplingParams(max_new_tokens=6))
    toks = [ev.token for ev in engine.step()]      # the prefill: eager, the first token
    while engine.busy or engine.sched.has_work():
        timers.start()
        toks += [ev.token for ev in engine.step()]
    timers.undo()
    rows = [dict(zip(PHASES, r)) for r in timers.rows]
    graph_rows = [r for r in rows if r["prepare"] > 0]
    assert len(graph_rows) == 5 and all(r["sampling"] > 0 and r["graph_launch"] == 0 for r in graph_rows)
    # then one is in flight
    assert graph_rows[0]["resolve"] == 0 and all(r["resolve"] > 0 for r in graph_rows[1:])
    assert engine.runner.clock is None and patchable() == before
    assert toks == want["output_ids"]


def test_warm_up_extends_reach_both_forms_over_a_cached_prefix():
    # the second chunk of each prompt past one chunk: 16 and 15 tokens absorbed (split KV), half a chunk and
    # one less in the MHA form; the pair's second prompt extends chunk - 37 cached rows by half a chunk less
    # one
    from dcpctl.plan.hf_config import MlaShape
    from dcpctl.runtime.attention.backends.mha_cudnn import KEY_QUANTUM
    from dcpctl.runtime.attention.form import pick_form
    from dcpctl.runtime.attention.layout import SeqChunk
    from dcpctl.runtime.engine.warm_up import PAIR_HEAD, warm_up_extends, warm_up_lengths, warm_up_pair
    v3 = MlaShape(hidden_size=7168, num_layers=61, num_heads=128, q_lora_rank=1536, kv_lora_rank=512,
                  qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, vocab_size=129280,
                  intermediate_size=18432, moe_intermediate_size=2048, n_routed_experts=256,
                  n_shared_experts=1)
    for chunk in (8192, 2048):
        got = warm_up_extends(chunk, 1 << 20)
        assert got == [chunk + 16, chunk + 15, chunk + chunk // 2, chunk + chunk // 2 - 1]
        assert warm_up_extends(chunk, chunk + 100) == [chunk + 16, chunk + 15]
        forms = [pick_form("auto", [SeqChunk(0, chunk, n - chunk)], v3)[0] for n in got]
        assert forms == [[False], [False], [True], [True]]
        assert {n - chunk for n in got} <= set(warm_up_lengths(chunk))     # no GEMM shape the ladder lacks
        head, second = warm_up_pair(chunk, 1 << 20)
        prefix, rest = chunk - head, second - (chunk - head)
        assert head == PAIR_HEAD and prefix % KEY_QUANTUM and prefix > KEY_QUANTUM and rest % 16
        assert (pick_form("auto", [SeqChunk(0, prefix, rest)], v3)[0] == [True]
                and rest in warm_up_lengths(chunk))
    assert warm_up_pair(8192, 8192) is None and warm_up_pair(64, 1 << 20) is None


def test_the_warm_up_pair_extends_a_prefix_of_no_round_size(path):
    # the scheduler packs the pair's first prompt and the first chunk - PAIR_HEAD tokens of the second into
    # one step, and the second's next chunk extends that prefix (the chunks each step runs, on the CPU engine)
    from dcpctl.runtime.engine.warm_up import PAIR_HEAD, warm_up_pair
    from dcpctl.runtime.models import load_model
    chunk = 128
    cfg = launch_cfg(1, 1, capacity=2048, chunk=chunk)
    cfg = dict(cfg, model={"path": path, "dtype": "float64"})
    engine = Engine(load_model(path, ParallelState.single(), False, torch.float64, "cpu"),
                    ParallelState.single(), config(cfg))
    steps, nxt = [], engine.sched.next_batch
    engine.sched.next_batch = lambda: steps.append(nxt()) or steps[-1]
    head, second = warm_up_pair(chunk, 2048)
    engine.generate([{"prompt_ids": [3 + p] * n, "max_new_tokens": 2} for p, n in enumerate((head, second))])
    firsts = [(ch.start, ch.num_tokens) for ch in steps[0]]
    assert firsts == [(0, PAIR_HEAD), (0, chunk - PAIR_HEAD)]
    extends = [(ch.start, ch.num_tokens) for st in steps[1:] for ch in st if ch.num_tokens > 1]
    assert extends == [(chunk - PAIR_HEAD, second - (chunk - PAIR_HEAD))]
