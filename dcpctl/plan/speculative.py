"""Speculative decoding parameters as SGLang 0.5.23 resolves them (`arg_groups/speculative_hook.py`).

- EAGLE, EAGLE3, NEXTN, STANDALONE (_handle_eagle_family): with no --speculative-num-steps, SGLang
  chooses steps 3, topk 1, draft tokens 4 itself (_auto_choose_speculative_params) and asserts that
  neither --speculative-eagle-topk nor --speculative-num-draft-tokens was given; with topk 1 the draft
  tokens are steps + 1. DeepSeek's MTP draft is the target checkpoint (NEXTN layers).
- NGRAM (_handle_ngram): 12 draft tokens by default, a BFS tree of breadth 10 (topk > 1), which
  paged kernels other than flashinfer/fa3/triton reject at page size > 1.
  STANDALONE on a DeepSeek-family target without a draft path drafts with the target checkpoint.
- DFLASH and DSPARK need --speculative-draft-model-path; their width comes from the draft checkpoint.
- UNO needs --uno-lora-path (not planned by dcpctl).
- With attention DP: STANDALONE and NGRAM are refused; DFLASH and DSPARK need --enable-dp-lm-head
  (not planned by dcpctl).
"""
from __future__ import annotations

from typing import Callable

from dcpctl.plan.errors import Violation
from dcpctl.plan.request import PlanRequest

EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
# _handle_eagle_family: these use the target checkpoint as draft when no draft path is given
MTP_ARCHS = ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "MistralLarge3ForCausalLM")
AUTO_PARAMS = (3, 1, 4)  # steps, topk, draft tokens
NGRAM_DRAFT_TOKENS, NGRAM_BFS_BREADTH = 12, 10
PAGE_TREE_KERNELS = ("flashinfer", "fa3", "triton")

Add = Callable[[Violation], None]


def num_draft_tokens(req: PlanRequest, kernel: str, page: int, add: Add,
                     warn: Callable[[str], None]) -> tuple[int | None, str] | None:
    """(draft tokens verified per request per step, reason); None without --speculative-algorithm."""
    algo, k, steps, topk = (req.speculative_algorithm, req.speculative_num_draft_tokens,
                            req.speculative_num_steps, req.speculative_eagle_topk)
    if not algo:
        given = [f for f, v in (("--speculative-num-draft-tokens", k), ("--speculative-num-steps", steps),
                                ("--speculative-eagle-topk", topk)) if v is not None]
        if given:
            warn(f"{', '.join(given)} ignored: no --speculative-algorithm")
        return None
    if algo == "UNO":
        add(Violation("spec_uno", "--speculative-algorithm UNO needs --uno-lora-path (a LoRA draft on the "
                      "target), which dcpctl does not plan"))
        return k, "UNO: set by --speculative-num-draft-tokens" if k else "UNO: chosen by SGLang"
    _attention_dp(req, algo, add)
    mtp = algo == "STANDALONE" and any(a in MTP_ARCHS for a in req.model.architectures)
    if algo in ("STANDALONE", "DFLASH", "DSPARK") and req.draft_model is None and not mtp:
        add(Violation("spec_draft_model",
                      f"--speculative-algorithm {algo} needs --speculative-draft-model-path"))
    if algo in EAGLE_FAMILY:
        _tree_page(algo, topk or 1, kernel, page, add)
        return _eagle(algo, k, steps, topk, add)
    if algo == "NGRAM":
        _tree_page(algo, NGRAM_BFS_BREADTH, kernel, page, add)
        return (k, "set by --speculative-num-draft-tokens") if k else (NGRAM_DRAFT_TOKENS, "NGRAM default")
    return (k, "set by --speculative-num-draft-tokens") if k else (None, f"{algo}: from the draft checkpoint")


def auto_steps_topk(req: PlanRequest) -> dict[str, int]:
    """The steps and topk SGLang chooses for an EAGLE-family plan given none of the three (else {})."""
    given = (req.speculative_num_steps, req.speculative_eagle_topk, req.speculative_num_draft_tokens)
    if req.speculative_algorithm not in EAGLE_FAMILY or any(v is not None for v in given):
        return {}
    return {"speculative_num_steps": AUTO_PARAMS[0], "speculative_eagle_topk": AUTO_PARAMS[1]}


def _attention_dp(req: PlanRequest, algo: str, add: Add) -> None:
    n = req.topology.attn_dp
    if n > 1 and algo in ("STANDALONE", "NGRAM"):
        add(Violation("spec_attention_dp", f"--speculative-algorithm {algo} does not support attention DP "
                      f"(attn_dp {n}) in SGLang; use EAGLE/NEXTN or attn_dp 1"))
    elif n > 1 and algo in ("DFLASH", "DSPARK"):
        add(Violation("spec_attention_dp", f"--speculative-algorithm {algo} with attention DP (attn_dp {n}) "
                      "needs SGLang's --enable-dp-lm-head, which dcpctl does not plan"))


def _tree_page(algo: str, topk: int, kernel: str, page: int, add: Add) -> None:
    if topk > 1 and page > 1 and kernel not in PAGE_TREE_KERNELS:
        add(Violation("spec_tree_page", f"{algo} drafts a tree (topk {topk} > 1), which {kernel} cannot "
                      f"verify at page_size ({page}) > 1; use page size 1, topk 1 or "
                      f"{'/'.join(PAGE_TREE_KERNELS)}"))


def _eagle(algo: str, k: int | None, steps: int | None, topk: int | None, add: Add) -> tuple[int | None, str]:
    if steps is None:
        if k is not None or topk is not None:
            add(Violation("spec_eagle_params", f"--speculative-algorithm {algo}: give "
                          "--speculative-num-steps with "
                          "--speculative-num-draft-tokens/--speculative-eagle-topk, or none of them (SGLang "
                          f"then chooses steps {AUTO_PARAMS[0]}, topk {AUTO_PARAMS[1]}, draft tokens "
                          f"{AUTO_PARAMS[2]})"))
            return k, "set by --speculative-num-draft-tokens"
        return AUTO_PARAMS[2], (f"{algo} without --speculative-num-steps: SGLang chooses steps "
                                f"{AUTO_PARAMS[0]}, topk {AUTO_PARAMS[1]}, draft tokens {AUTO_PARAMS[2]}")
    if topk is None:
        add(Violation("spec_eagle_params", f"--speculative-algorithm {algo} with --speculative-num-steps "
                      f"{steps} also needs --speculative-eagle-topk (SGLang 0.5.23 fails without it)"))
        return k, "set by --speculative-num-draft-tokens"
    if topk == 1:
        return steps + 1, f"--speculative-num-steps {steps} with topk 1: steps + 1 draft tokens"
    return k, "set by --speculative-num-draft-tokens"
