"""benchmarks/fp8_accuracy.py's arithmetic: bits per byte, KL, the same-experts filters, the greedy
comparison, auto's emulation, the report."""
import argparse
import math
import sys

import torch

from benchmarks import fp8_accuracy as acc
from dcpctl.runtime.kernels.fp8_parts import PREFILL_ROWS


def test_bits_per_byte_counts_every_predicted_byte_once():
    # two sequences of 3 and 2 tokens: 2 + 1 predictions. Uniform logits over 8 ids cost 3 bits each; a row
    # whose right id has logit ln(7) above 7 zeros costs -log2(7/14) = 1 bit; the last row of each sequence
    # predicts nothing
    V = 8
    a = torch.zeros(3, V)
    a[1, 5] = math.log(7)            # predicts ids[0][2] = 5: 1 bit
    a[2] = 1e4                       # the last row: not a prediction, must not count
    b = torch.zeros(2, V)            # predicts ids[1][1]: 3 bits
    got = acc.bits_per_byte([a, b], [[1, 2, 5], [0, 4]])
    assert abs(got - (3 + 1 + 3) / 3) < 1e-6     # ln(7) in float32


def test_bits_per_byte_of_the_record_slice_matches_its_cross_entropy():
    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(0, 20, (9,), generator=g).tolist() for _ in range(2)]
    logits = [torch.randn(9, 20, generator=g, dtype=torch.float64) for _ in range(2)]
    want = (torch.nn.functional.cross_entropy(torch.cat([lg[:-1] for lg in logits]),
                                              torch.tensor([t for s in ids for t in s[1:]])).item()
            / math.log(2))
    assert abs(acc.bits_per_byte(logits, ids) - want) < 1e-12


def test_same_experts_filters_keep_only_steps_routed_alike():
    # one MoE layer, top-1; prompts of 2 and 1 tokens; 3 decode steps: forward 0 is the prefill (3 rows)
    a = [torch.tensor([[0], [1], [2]])] + [torch.tensor([[3], [4]]) for _ in range(3)]
    b = [t.clone() for t in a]
    b[0][0, 0] = 9       # prompt 0's first token (not its last): only the whole-context filter sees it
    b[2][1, 0] = 9       # prompt 1 at decode step 2
    own = acc.token_routing_differs(a, b, [2, 1], 3)
    assert own == [[False] * 4, [False, False, True, False]]
    whole = acc.routing_differs(a, b, [2, 1], 3)
    assert whole == [[True] * 4, [False, False, True, True]]
    values = [[0.1, 0.2, 0.3, 0.4], [1.0, 2.0, 3.0, 4.0]]
    assert acc.on_same_experts(values, own) == [0.1, 0.2, 0.3, 0.4, 1.0, 2.0, 4.0]
    assert acc.on_same_experts(values, whole) == [1.0, 2.0]


def test_greedy_report_names_the_first_differing_step_and_the_reference_margin_there():
    logits16 = [torch.zeros(4, 5) for _ in range(3)]
    logits16[1][2, 3], logits16[1][2, 1] = 2.0, 1.5
    got = acc.greedy_report([[1, 2, 3, 4], [1, 2, 1, 4], [7, 7, 7, 7]],
                            [[1, 2, 3, 4], [1, 2, 3, 4], [7, 7, 7, 7]], logits16)
    assert got == {"equal": "2/3", "differ": [{"prompt": 1, "first_step": 2, "top2_margin": 0.5}]}
    assert acc.first_divergence([1, 2], [1, 2, 3]) == 2 and acc.first_divergence([1], [1]) is None


def test_prompts_are_heldout_line_starts_behind_bos():
    prompts, text = acc.greedy_prompts(), (acc.default_model().path / "heldout.txt").read_bytes()
    assert len(prompts) == acc.PROMPTS and len({tuple(p) for p in prompts}) == acc.PROMPTS
    for p in prompts:
        body = bytes(p[1:])
        assert p[0] == acc.ByteTokenizer.bos_token_id and len(body) == acc.PROMPT_BYTES
        at = text.index(body)
        assert at == 0 or text[at - 1] == ord("\n")
    windows = acc.heldout_windows()
    assert len(windows) == 8 and all(len(w) == 256 for w in windows) and bytes(windows[0][1:]) == text[:255]


def test_each_device_judges_a_pair_the_report_computes():
    # cuda: the served kernels; cpu: the two checkpoints in float64
    assert acc.TARGET_PAIR == {"cuda": ("fp8", "bf16"), "cpu": ("f64_fp8", "f64_bf16")}
    for pair in acc.TARGET_PAIR.values():
        assert pair in acc.GREEDY_PAIRS and pair in acc.STEP_PAIRS
    assert {p for pair in acc.GREEDY_PAIRS + acc.STEP_PAIRS for p in pair} == set(acc.PATHS)


def test_the_bf16_form_is_every_trained_tensor_rounded_to_bf16(tmp_path):
    from safetensors.torch import load_file
    d = acc.write_trained(tmp_path / "bf16", "cpu", fp8=False)
    trained = load_file(str(acc.default_model().path / "model.safetensors"))
    got = load_file(str(d / "model.safetensors"))
    assert got.keys() == trained.keys()
    assert all(got[k].dtype == torch.bfloat16 and torch.equal(got[k],
                                                              trained[k].to(torch.bfloat16)) for k in got)
    assert "quantization_config" not in (d / "config.json").read_text()


def test_split_method_quantizes_the_activations_only_of_gemms_past_prefill_rows():
    # --prefill-mode w8a8 with --mode w8a16: a GEMM of more than PREFILL_ROWS rows equals w8a8's emulation
    # (its rows quantized 1x128 e4m3), one of at most PREFILL_ROWS w8a16's (rows as they are); the two differ
    # on these rows
    from tests.runtime.models.test_model_fp8 import quantize
    g = torch.Generator().manual_seed(1)
    w8, s = quantize(torch.randn(256, 256, generator=g), (128, 128))
    for rows in (PREFILL_ROWS, PREFILL_ROWS + 1):
        x = torch.randn(rows, 256, generator=g, dtype=torch.float64)
        got = acc.split_method(x, w8, s, (128, 128), decode="w8a16", prefill="w8a8")
        a8, a16 = (acc.emulated_fp8_matmul(x, w8, s, (128, 128), mode=m) for m in ("w8a8", "w8a16"))
        assert not torch.equal(a8, a16)
        assert torch.equal(got, a8 if rows > PREFILL_ROWS else a16)


def test_auto_is_emulated_as_w8a16_decode_and_w8a8_prefill():
    assert acc.emulated_methods("auto", None) == ("w8a16", "w8a8")
    assert acc.emulated_methods("w8a16", "w8a8") == ("w8a16", "w8a8")
    assert acc.emulated_methods("w8a8", None) == ("w8a8", "w8a8")
    assert acc.emulated_methods("w8a16", None) == ("w8a16", "w8a16")


def test_split_method_counts_a_grouped_gemms_rows_per_expert_as_the_kernels_do():
    # two experts, the first with most rows: the method follows the mean rows per expert (R // E), which is
    # what fp8_tiles.method gets from fp8_matmul under auto (no measured table here), not either group's rows
    from dcpctl.runtime.kernels import fp8_tiles
    from tests.runtime.models.test_model_fp8 import quantize
    g = torch.Generator().manual_seed(2)
    parts = [quantize(torch.randn(256, 256, generator=g), (128, 128)) for _ in range(2)]
    w8, s = torch.stack([w for w, _ in parts]), torch.stack([sc for _, sc in parts])
    decode, prefill = acc.emulated_methods("auto", None)
    for total in (2 * PREFILL_ROWS, 2 * PREFILL_ROWS + 2):
        x = torch.randn(total, 256, generator=g, dtype=torch.float64)
        ends = torch.tensor([total - 3, total], dtype=torch.int32)    # expert 0: more than PREFILL_ROWS rows
        got = acc.split_method(x, w8, s, (128, 128), ends, decode=decode, prefill=prefill)
        kernel = fp8_tiles.method(256, 256, max(1, total // 2), 2, "auto", tables=fp8_tiles.Fp8Tables())
        want = acc.emulated_fp8_matmul(x, w8, s, (128, 128), ends, mode=kernel)
        assert kernel == ("w8a8" if total // 2 > PREFILL_ROWS else "w8a16")
        assert torch.equal(got, want)
    # dense: the rule at the bound agrees with fp8_tiles.method's (cuBLAS is a w8a8 too)
    for rows in (1, PREFILL_ROWS, PREFILL_ROWS + 1, 4 * PREFILL_ROWS):
        m = fp8_tiles.method(256, 256, rows, 1, "auto", tables=fp8_tiles.Fp8Tables())
        assert (prefill if rows > PREFILL_ROWS else decode) == ("w8a8" if m == "cublas" else m)


def test_kl_is_zero_on_itself_positive_on_a_perturbed_path_and_matches_its_sum():
    g = torch.Generator().manual_seed(3)
    ref = [torch.randn(n, 11, generator=g, dtype=torch.float64) * 3 for n in (6, 4)]
    same = acc.kl_per_token(ref, [r.clone() for r in ref])
    assert same.shape == (5 + 3,) and torch.equal(same, torch.zeros(8, dtype=torch.float64))
    moved = [r + 0.05 * torch.randn(r.shape, generator=g, dtype=torch.float64) for r in ref]
    kl = acc.kl_per_token(ref, moved)
    assert (kl > 0).all()
    lp, lq = (torch.cat([x[:-1] for x in xs]).log_softmax(-1) for xs in (ref, moved))
    assert torch.allclose(kl, (lp.exp() * (lp - lq)).sum(-1), rtol=1e-10, atol=0)
    # a shift of every logit of a row is the same distribution; the last row of each sequence is not scored
    shifted = [r + 7.0 for r in ref]
    shifted[0][-1] = 0.0
    assert acc.kl_per_token(ref, shifted).abs().max() < 1e-12
    # a token P gives no probability (logit -inf) adds nothing
    ref[0][0, 3] = -math.inf
    assert acc.kl_per_token(ref, moved).isfinite().all()


def test_kl_stats_are_mean_median_p99_max():
    kl = torch.arange(101, dtype=torch.float64) / 100     # 0, 0.01, ..., 1
    assert acc.kl_stats(kl) == {"mean": 0.5, "median": 0.5, "p99": 0.99, "max": 1.0}


def _fake_paths(bpb: dict[str, float]) -> dict[str, dict]:
    """Five paths' results without a model: held-out logits of the right shape (f64_fp8's perturbed), one id
    sequence a prompt (f64_fp8's differing on prompt 0), no routes."""
    g = torch.Generator().manual_seed(4)
    windows = acc.heldout_windows()
    logits = [torch.randn(len(w), 8, generator=g, dtype=torch.float64) for w in windows]
    forced = [torch.zeros(acc.NEW_TOKENS + 1, 8, dtype=torch.float64) for _ in range(acc.PROMPTS)]
    out = {}
    for name in acc.PATHS:
        ids = [[1] * acc.NEW_TOKENS for _ in range(acc.PROMPTS)]
        held = [lg.clone() for lg in logits]
        if name == "f64_fp8":
            ids[0][3] = 2
            held = [lg + 0.1 * torch.randn(lg.shape, generator=g, dtype=torch.float64) for lg in held]
        out[name] = {"bpb": bpb[name], "heldout_logits": held, "ids": ids,
                     "free_logits": [f[:acc.NEW_TOKENS] for f in forced], "forced": forced, "routes": []}
    return out


def _args(**kw) -> argparse.Namespace:
    base = dict(mode="auto", prefill_mode=None, device="cpu", fp32_logits=False)
    base.update(kw)
    args = argparse.Namespace(**base)
    args.decode_mode, args.prefill_mode = acc.emulated_methods(args.mode, args.prefill_mode)
    return args


def test_the_report_judges_bits_per_byte_within_half_a_percent_and_reports_kl_and_greedy():
    bpb = {"bf16": 1.83, "fp8": 1.84, "f64": 1.83, "f64_bf16": 1.83, "f64_fp8": 1.83 * 1.0049}
    rep = acc.build_report(_fake_paths(bpb), _args(), "cpu")
    assert rep["bits_per_byte"]["target"] == "|f64_fp8_vs_f64_bf16_rel| <= 0.005"
    assert rep["bits_per_byte"]["met"]
    assert "auto" in rep["methods"] and "w8a16" in rep["methods"] and "w8a8" in rep["methods"]
    kl = rep["kl_per_token_nats"]
    assert kl["positions"] == 8 * 255
    assert {f"{a}_vs_{b}" for a, b in acc.KL_PAIRS} <= kl.keys()
    assert kl["fp8_vs_bf16"] == {"mean": 0.0, "median": 0.0, "p99": 0.0, "max": 0.0}
    assert 0 < kl["f64_fp8_vs_f64_bf16"]["median"] <= kl["f64_fp8_vs_f64_bf16"]["p99"] \
        <= kl["f64_fp8_vs_f64_bf16"]["max"]
    # greedy: counted and detailed, judged nowhere
    greedy = rep["greedy"]
    assert "met" not in greedy and "target" not in greedy
    assert greedy["f64_fp8_vs_f64_bf16"]["equal"] == f"{acc.PROMPTS - 1}/{acc.PROMPTS}"
    assert greedy["f64_fp8_vs_f64_bf16"]["differ"][0]["first_step"] == 3
    assert greedy["fp8_vs_bf16"]["equal"] == f"{acc.PROMPTS}/{acc.PROMPTS}"
    text = acc.summary(rep)
    assert "f64_fp8_vs_f64_bf16" in text and "met" in text and "p99" in text
    # 0.6% off: not met; on cuda the served pair is judged
    bpb["f64_fp8"] = 1.83 * 1.006
    assert not acc.build_report(_fake_paths(bpb), _args(), "cpu")["bits_per_byte"]["met"]
    rep = acc.build_report(_fake_paths(bpb), _args(device="cuda"), "cuda")
    assert rep["target_comparison"]["pair"] == "fp8_vs_bf16" and not rep["bits_per_byte"]["met"]
    assert "fp8_tiles.method" in rep["methods"]


def test_auto_takes_w8a8_prefill_only_and_cuda_refuses_only_a_split_it_cannot_run(monkeypatch, capsys):
    def ns(**kw):
        return argparse.Namespace(**{"mode": "auto", "prefill_mode": None, "device": "cpu", **kw})
    assert acc.refusal(ns()) is None and acc.refusal(ns(device="cuda")) is None
    assert acc.refusal(ns(prefill_mode="w8a8")) is None
    assert acc.refusal(ns(prefill_mode="w8a16")) is not None
    assert acc.refusal(ns(mode="w8a16", prefill_mode="w8a8")) is None
    assert acc.refusal(ns(mode="w8a16", prefill_mode="w8a8", device="cuda")) is not None
    assert acc.refusal(ns(mode="w8a8", prefill_mode="w8a8", device="cuda")) is None
    # main stops before loading anything
    monkeypatch.setattr(sys, "argv", ["fp8_accuracy", "--mode", "auto", "--prefill-mode", "w8a16"])
    assert acc.main() == 2 and "--mode auto" in capsys.readouterr().err
