"""The engine's CUDA-graph decode on one GPU (skipped without CUDA): capture, replay with changing batch
composition and padding, the grouped MoE path inside the graph, the eager fallback above the largest
size, and the same greedy tokens as eager steps (bf16, the trained default model: its top-2 margins are
far above bf16 noise).  Numbers go to $DCPCTL_GPU_REPORT/<test>.json when that is set."""

import pytest
import torch

from dcpctl.runtime.engine import Engine
from dcpctl.runtime.parallel import ParallelState
from tests.gpu_report import report as _report
from tests.runtime.configs import config
from tests.runtime.engine.test_engine import launch_cfg

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _prompts():
    from dcpctl.launch.default_model import TRAINED_DIR
    from dcpctl.runtime.tokenizer import load_tokenizer
    path = str(TRAINED_DIR)
    tok = load_tokenizer(path)
    texts = ["def ", "import os\n", "class Foo(", "    return ", "for i in range(", "# ", "if __name__",
             "x = [", "try:\n    ", "with open("]
    return path, [tok.encode(t, add_bos=True) for t in texts]


def _engine(path, sizes, chunk=64):
    """A bf16 engine on one GPU with decode graphs of `sizes` ([]: every step eager), warmed up."""
    from dcpctl.runtime.models import load_model
    ps = ParallelState.single()
    cfg = launch_cfg(1, 1, capacity=4096, chunk=chunk)
    cfg.update(device="cuda", dist_backend="nccl", model={"path": path, "dtype": "bfloat16"},
               cuda_graph={"batch_sizes": sizes, "reason": "cuda graphs: test"})
    cfg["kv"].update(page_size=16, max_running_requests=8)
    model = load_model(path, ps, False, torch.bfloat16, torch.device("cuda"))
    engine = Engine(model, ps, config(cfg))
    engine.warm_up(prompts=True)
    return engine


def _generate(path, prompts, sizes, max_new=(12, 5, 9, 16, 3, 7, 11, 14, 6, 10)):
    engine = _engine(path, sizes)
    replays = []
    if engine.runner.graphs is not None:
        run = engine.runner.graphs.replay
        engine.runner.graphs.replay = lambda *a: replays.append(len(a[1])) or run(*a)
    reqs = [{"prompt_ids": p, "max_new_tokens": n} for p, n in zip(prompts, max_new)]
    out = engine.generate(reqs)["outputs"]
    return [o["output_ids"] for o in out], replays, engine


def test_graph_decode_equals_eager_greedy():
    path, prompts = _prompts()
    eager, none, _ = _generate(path, prompts, [])
    graph, replays, engine = _generate(path, prompts, [1, 2, 4, 6])   # 8 running > 6: eager; 3, 5: padded
    assert not none and replays and max(replays) <= 6
    same = sum(a == b for a, b in zip(eager, graph))
    _report("graph_decode_equals_eager", {"prompts": len(prompts), "equal": same, "replays": len(replays),
                                          "replayed_batch_sizes": sorted(set(replays)),
                                          "graphs": len(engine.runner.graphs.graphs),
                                          "capture_s": engine.runner.graphs.capture_s})
    assert same == len(prompts), [(a, b) for a, b in zip(eager, graph) if a != b]


def test_the_step_clock_times_each_graph_launch_and_its_gpu_time():
    """The step trace's clock (engine/phases.py), handed to the model runner: every step that replays a graph
    has its metadata and launch host times, one pair of CUDA events around its launch with a positive GPU time
    between them, and the runner runs without a clock after undo (nothing of torch is patched)."""
    from dcpctl.runtime.engine import SamplingParams
    from dcpctl.runtime.engine.phases import PHASES, PhaseTimers
    path, prompts = _prompts()
    engine = _engine(path, [1, 2, 4])
    replay = torch.cuda.CUDAGraph.replay
    timers = PhaseTimers(engine.runner, replays=True)
    assert timers.on and torch.cuda.CUDAGraph.replay is replay
    for i, p in enumerate(prompts[:4]):
        engine.submit(i, p, SamplingParams(max_new_tokens=12, ignore_eos=True))
    while engine.busy or engine.sched.has_work():
        timers.start()
        engine.step()
    timers.undo()
    torch.cuda.synchronize()
    rows = [dict(zip(PHASES, r)) for r in timers.rows]
    graph_rows = [r for r in rows if r["prepare"] > 0]
    gpu_ms = [s.elapsed_time(e) for s, e in timers.replays]
    launch_us = sorted(r["graph_launch"] * 1e6 for r in graph_rows)
    _report("step_clock", {"steps": len(rows), "graph_steps": len(graph_rows), "replays": len(gpu_ms),
                           "launch_us_median": launch_us[len(launch_us) // 2] if launch_us else None,
                           "gpu_ms_median": sorted(gpu_ms)[len(gpu_ms) // 2] if gpu_ms else None})
    assert len(graph_rows) >= 8 and all(r["graph_launch"] > 0 for r in graph_rows)
    assert len(gpu_ms) == len(graph_rows) and all(ms > 0 for ms in gpu_ms)
    assert engine.runner.clock is None


def test_retraction_with_pipelined_graph_steps_keeps_greedy_tokens():
    """A pool of 160 tokens for 8 running requests: the scheduler retracts (reading the pipelined step in
    flight first), the retracted recompute their tokens on return, and every greedy token equals a roomy eager
    run."""
    from dcpctl.runtime.models import load_model
    path, prompts = _prompts()
    want, _, _ = _generate(path, prompts, [])
    ps = ParallelState.single()
    cfg = launch_cfg(1, 1, capacity=160, chunk=64)
    cfg.update(device="cuda", dist_backend="nccl", model={"path": path, "dtype": "bfloat16"},
               cuda_graph={"batch_sizes": [1, 2, 4, 8], "reason": "cuda graphs: test"},
               schedule={"decode_headroom": 1})
    cfg["kv"].update(page_size=16, max_running_requests=8)
    engine = Engine(load_model(path, ps, False, torch.bfloat16, torch.device("cuda")), ps, config(cfg))
    engine.warm_up()
    max_new = (12, 5, 9, 16, 3, 7, 11, 14, 6, 10)
    out = engine.generate([{"prompt_ids": p, "max_new_tokens": n}
                           for p, n in zip(prompts, max_new)])["outputs"]
    got = [o["output_ids"] for o in out]
    engine.check_drained()
    _report("retraction_with_graphs", {"retractions": engine.sched.retractions,
                                       "equal": sum(a == b for a, b in zip(want, got))})
    assert engine.sched.retractions > 0
    assert got == want, [(a, b) for a, b in zip(want, got) if a != b]


def test_mixed_steps_replay_decode_graphs_beside_prefill():
    """Four streams decoding while two long prompts arrive in chunks: the mixed steps replay the decodes'
    graph beside an eager forward of the prompt chunks (engine/mixed.py: kind graph+prefill), and every greedy
    token equals the request's own when it runs alone."""
    from dcpctl.runtime.engine import SamplingParams
    from dcpctl.runtime.engine.mixed import KIND
    path, prompts = _prompts()
    long = prompts[0] + [t for p in prompts[1:] * 5 for t in p[1:]]          # a few chunks of 64 tokens
    reqs = [{"prompt_ids": p, "max_new_tokens": 40} for p in prompts[:4]]
    reqs += [{"prompt_ids": long, "max_new_tokens": 8}, {"prompt_ids": long[7:], "max_new_tokens": 6}]
    joins = {0: [0, 1, 2, 3], 4: [4], 7: [5]}
    alone = _engine(path, [])
    want = [alone.generate([r])["outputs"][0]["output_ids"] for r in reqs]
    engine = _engine(path, [1, 2, 4, 8])
    got, kinds, step = {}, [], 0
    while step in joins or engine.busy or engine.sched.has_work():
        for rid in joins.get(step, []):
            engine.submit(rid, reqs[rid]["prompt_ids"], SamplingParams.from_dict(reqs[rid]))
        for ev in engine.step():
            got.setdefault(ev.rid, []).append(ev.token)
        kinds.append(engine.last_step[0])
        step += 1
    engine.check_drained()
    same = sum(got[i] == w for i, w in enumerate(want))
    _report("mixed_steps_with_graphs", {"long_prompt": len(long), "equal": same, "requests": len(reqs),
                                        "steps": {k: kinds.count(k) for k in sorted(set(kinds))}})
    assert kinds.count(KIND) >= 3, kinds
    assert same == len(reqs), [(got[i], w) for i, w in enumerate(want) if got[i] != w]


def _pieces_engine(path, prefill):
    """(engine, model): bf16 on one GPU, chunks of 64 tokens, no decode graphs, `prefill` the launch config's
    prefill graph fields (launch/cuda_graphs.prefill_section; {}: none)."""
    from dcpctl.runtime.models import load_model
    ps = ParallelState.single()
    cfg = launch_cfg(1, 1, capacity=4096, chunk=64)
    cfg.update(device="cuda", dist_backend="nccl", model={"path": path, "dtype": "bfloat16"},
               cuda_graph={"batch_sizes": [], "reason": "cuda graphs: test", **prefill})
    cfg["kv"].update(page_size=16, max_running_requests=8)
    model = load_model(path, ps, False, torch.bfloat16, torch.device("cuda"))
    return Engine(model, ps, config(cfg)), model


def test_prefill_mlp_pieces_keep_greedy_tokens():
    """Each layer's MLP captured at SGLang's prefill token counts up to 256 (runtime/models/mlp_graphs.py):
    the prompts' chunks (up to 64 tokens) and the decode steps replay the pieces, and every greedy token
    equals the eager run's."""
    from dcpctl.launch.cuda_graphs import prefill_section
    path, prompts = _prompts()
    want, _, _ = _generate(path, prompts, [])
    engine, model = _pieces_engine(path, prefill_section("cuda", False, None, 256, None, 64))
    engine.warm_up(prompts=True)
    g = model.mlp_graphs
    assert g is not None and g.buckets[-1] == 256
    before = g.replays
    max_new = (12, 5, 9, 16, 3, 7, 11, 14, 6, 10)
    out = engine.generate([{"prompt_ids": p, "max_new_tokens": n}
                           for p, n in zip(prompts, max_new)])["outputs"]
    got = [o["output_ids"] for o in out]
    _report("prefill_mlp_pieces",
            {"pieces": len(g.graphs), "capture_s": g.capture_s, "pool_bytes": g.pool_bytes,
             "replays": g.replays - before, "equal": sum(a == b for a, b in zip(want, got))})
    assert g.replays - before > 0
    assert got == want, [(a, b) for a, b in zip(want, got) if a != b]


def test_fp8_prefill_mlp_pieces_keep_greedy_tokens(tmp_path):
    """The trained model block-FP8 (benchmarks/fp8_model_check.write_trained) under w8a16: its MLP pieces stop
    at 512 tokens (the grouped FP8 experts' pass limit), the prompts' chunks replay them, and every greedy
    token equals the run without pieces (w8a16 computes a row alike whatever rows share its GEMM; under auto
    a bucket's padded rows may move a GEMM across fp8_parts.PREFILL_ROWS: the next test covers auto)."""
    from benchmarks.fp8_model_check import write_trained
    from dcpctl.launch.cuda_graphs import prefill_section
    from dcpctl.runtime import settings
    _, prompts = _prompts()
    path = str(write_trained(tmp_path / "fp8", "cuda"))
    max_new = (12, 5, 9, 16, 3, 7, 11, 14, 6, 10)
    runs = {}
    for pieces in (False, True):
        with settings.using(fp8_gemm="w8a16"):
            engine, model = _pieces_engine(path,
                                           prefill_section("cuda", False, None, None, None, 8192)
                                           if pieces else {})
            engine.warm_up()
            out = engine.generate([{"prompt_ids": p, "max_new_tokens": n} for p, n in zip(prompts, max_new)])
        runs[pieces] = ([o["output_ids"] for o in out["outputs"]], model.mlp_graphs)
    (want, none), (got, g) = runs[False], runs[True]
    assert none is None and g is not None and g.buckets[-1] == 512 and g.replays > 0
    _report("fp8_prefill_mlp_pieces",
            {"pieces": len(g.graphs), "capture_s": g.capture_s, "replays": g.replays,
             "equal": sum(a == b for a, b in zip(want, got))})
    assert got == want, [(a, b) for a, b in zip(want, got) if a != b]


@pytest.mark.parametrize("mode", ["w8a16", "auto"])
def test_fp8_pieces_replay_a_long_call_in_passes(tmp_path, mode):
    """A call past the block-FP8 MoE's 512-token pieces (a prompt chunk of up to MAX_PASSES x 512) replays
    them in passes: each pass's output is the grouped FP8 experts' eager output of the same rows, bf16
    rounding apart (a pass runs at its bucket's rows, where the tile setting may differ).  w8a16 caps the
    pieces at 512 tokens; auto where the experts pass fp8_tiles.PER_EXPERT_ROWS rows each (no table entry
    has this model's shapes), and its call is two whole 512-token passes, so that each pass's GEMMs run the
    eager call's methods."""
    from benchmarks.fp8_model_check import write_trained
    from dcpctl.runtime import settings
    from dcpctl.runtime.models import load_model
    from dcpctl.runtime.models.mlp import MoE
    from dcpctl.runtime.kernels.fp8_tiles import PER_EXPERT_ROWS
    from dcpctl.runtime.models.mlp import BLOCK_TOKENS
    from dcpctl.runtime.models.mlp_graphs import MlpGraphs, token_cap
    path = str(write_trained(tmp_path / "fp8", "cuda"))
    with settings.using(fp8_gemm=mode):
        model = load_model(path, ParallelState.single(), False, torch.bfloat16, torch.device("cuda"))
        layer = next(i for i, lay in enumerate(model.layers) if isinstance(lay.mlp, MoE))
        mlp = model.layers[layer].mlp
        rule = max(t for t in range(1, BLOCK_TOKENS + 1) if mlp.rows_per_expert(t) <= PER_EXPERT_ROWS)
        assert token_cap(model) == (512 if mode == "w8a16" else rule)
        cap = 512
        g = MlpGraphs(model, [256, cap])
        torch.manual_seed(0)
        x = torch.randn(700 if mode == "w8a16" else 2 * cap, model.cfg.hidden_size, device="cuda",
                        dtype=torch.bfloat16)
        got = g(mlp, x)
        assert g.replays == 2 and got.shape == x.shape
        want = torch.cat([mlp(x[:cap]), mlp(x[cap:])])
    _report(f"fp8_pieces_in_passes_{mode}",
            {"max_abs_diff_first_pass": float((got[:cap] - want[:cap]).abs().max()),
             "max_abs_diff": float((got - want).abs().max()), "max_abs": float(want.abs().max())})
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
