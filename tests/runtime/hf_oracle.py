"""Test-only helpers shared by the Hugging Face oracle tests: random weights, loading, cached decode."""
from __future__ import annotations

import torch


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Seeded weights: norms near 1, matrices 1/sqrt(fan_in), router correction bias small."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            x = torch.randn(p.shape, generator=g)
            p.copy_(1 + 0.2 * x if p.dim() == 1 else x * p.shape[-1] ** -0.5)
        for name, b in model.named_buffers():
            if "e_score_correction_bias" in name:
                b.copy_(0.1 * torch.randn(b.shape, generator=g))


def load_hf(path: str):
    """transformers' model for `path` in float64 with sdpa attention and eager experts."""
    import transformers
    cls = transformers.AutoModelForCausalLM
    try:
        return cls.from_pretrained(path, dtype=torch.float64, attn_implementation="sdpa",
                                   experts_implementation="eager").eval()
    except TypeError:  # transformers without experts_implementation
        return cls.from_pretrained(path, dtype=torch.float64, attn_implementation="sdpa").eval()


@torch.no_grad()
def hf_decode(hf, prompt: list[int], ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """HF prefill logits [len, V] and cached step-by-step decode logits [len(ids), V] feeding `ids`."""
    out = hf(torch.tensor([prompt]), use_cache=True)
    cache, dec = out.cache, [out.logits[0, :0]]
    for t in ids:
        step = hf(torch.tensor([[t]]), cache=cache, use_cache=True)
        cache = step.cache
        dec.append(step.logits[0, -1:])
    return out.logits[0], torch.cat(dec)


def max_rel_logprob_error(ours: torch.Tensor, ref: torch.Tensor) -> float:
    # ours, ref: [N, V] logits -> max |lp - lp_ref| / |lp_ref|
    a, b = ours.log_softmax(-1), ref.log_softmax(-1)
    return ((a - b).abs() / b.abs()).max().item()
