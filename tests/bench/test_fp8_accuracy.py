"""benchmarks/fp8_accuracy.py's arithmetic: bits per byte, the same-experts filters, the greedy comparison."""
import math

import torch

from benchmarks import fp8_accuracy as acc


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


def test_split_method_quantizes_the_activations_only_of_gemms_past_m_tile_rows():
    # --prefill-mode w8a8 with --mode w8a16: a GEMM of more than M_TILE_ROWS rows equals w8a8's emulation (its
    # rows quantized 1x128 e4m3), one of at most M_TILE_ROWS w8a16's (rows as they are); the two differ on
    # these rows
    from dcpctl.runtime.kernels.fp8_tiles import M_TILE_ROWS
    from tests.runtime.models.test_model_fp8 import quantize
    g = torch.Generator().manual_seed(1)
    w8, s = quantize(torch.randn(256, 256, generator=g), (128, 128))
    for rows in (M_TILE_ROWS, M_TILE_ROWS + 1):
        x = torch.randn(rows, 256, generator=g, dtype=torch.float64)
        got = acc.split_method(x, w8, s, (128, 128), decode="w8a16", prefill="w8a8")
        a8, a16 = (acc.emulated_fp8_matmul(x, w8, s, (128, 128), mode=m) for m in ("w8a8", "w8a16"))
        assert not torch.equal(a8, a16)
        assert torch.equal(got, a8 if rows > M_TILE_ROWS else a16)
