"""Speculative decoding, STANDALONE: a small draft model proposes K tokens; the target verifies them.

One speculative step of a decode batch (static verification: the same K for every request; L is a
request's length, tokens[L-1] its last sampled token, whose target KV is not written yet):

  1. draft: catch up on tokens[d_len:L], then K - 1 single-token steps -> x_1..x_K (greedy).  The
     draft runs unsharded on every rank with its own KV (dcp = 1: replicated, never striped).
  2. target: ONE forward of K + 1 rows per request, positions L-1 .. L+K-1 (tokens[L-1], x_1..x_K),
     through the normal DCP context: owned rows are written, the local shard attended causally by
     global position, partials merged by LSE exactly like decode.
  3. accept: row j's token y_j is chosen exactly as plain decode would choose it (the request's
     sampler and generator); continue while y_j == x_{j+1}; emit y_0..y_n (n accepted drafts plus
     the target's own next token), cut at EOS or max_new_tokens.
  4. roll back: the target's valid length becomes L - 1 + m (m tokens emitted), the draft's
     min(L + n, L + K - 1).  Rows past them are stale and never attended: a layout covers only
     positions below its chunk's end, and every step rewrites its rows before attending them.

Greedy output equals plain greedy output; sampled output too, since every emitted token is drawn
from the target's distribution given the accepted prefix, one generator draw per emitted token.
A request reserves K more KV positions than plain decode (Sequence.kv_extra): verification
writes up to K rows past the last position plain decode would write.  The model runner runs steps 1
and 2 (engine/model_runner.py, the `spec` mode of engine/batch.py); the engine hands step 3's
verification to `accept`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch
from torch import Tensor

from dcpctl.contract.launch_config import Decisions, SpeculativeSection
from dcpctl.runtime.attention.dcp import SeqChunk, build_context
from dcpctl.runtime.attention.layout import host_ints, to_device
from dcpctl.runtime.engine.events import Event
from dcpctl.runtime.engine.model import latent_dims
from dcpctl.runtime.engine.request import Sequence
from dcpctl.runtime.engine.sample import Sampler
from dcpctl.runtime.kv.allocator import VirtualAllocator
from dcpctl.runtime.kv.pool import KVPool
from dcpctl.runtime.parallel import Axis, ParallelState
from dcpctl.runtime.sampling import greedy

# the draft runs unsharded (dcp 1): no exchange, no replicated query; the local attention's LSE in base e
DRAFT_DECISIONS = Decisions(dcp_comm_backend="ag_rs", dcp_replicate_q_proj=False, lse_base="e")


class SpecConfigError(ValueError):
    """The launch config's `speculative` section cannot run with this target model."""


@dataclass
class SpecCounters:
    """Per rank; proposal counts are kept by each attention-DP replica's first rank only."""

    proposed: int = 0        # draft tokens offered to the target (K per request per step)
    accepted: int = 0        # of those, equal to the target's own choice
    emitted: int = 0         # tokens produced by speculative steps (accepted + bonus, after cuts)
    verifications: int = 0   # request-verifications: requests in each target step, summed
    target_steps: int = 0    # target forwards that verified candidates
    draft_rows: int = 0      # draft KV rows held by finished requests on this rank (never striped)


@dataclass
class Verification:
    """One verification forward's result: each request's drafts and the target's logits over its K + 1
    rows."""

    seqs: list[Sequence]
    drafts: list[list[int]]
    logits: Tensor               # [B * (K + 1), V], request i's rows i * (K + 1) .. (i + 1) * (K + 1) - 1


def make_speculative(section: SpeculativeSection | None, target: Any, *, capacity: int, page_size: int,
                     dtype: torch.dtype, device: torch.device, lead: bool,
                     hybrid: bool) -> "SpecDecoder | None":
    """The speculative decoder for the launch config's `speculative` section, or None without one: a draft
    beside `target` with KV for `capacity` virtual positions (the target's) in pages of `page_size`; `lead`:
    this rank keeps its replica's proposal counts; `hybrid`: the target keeps request-indexed state
    (refused)."""
    if section is None:
        return None
    if hybrid:
        raise SpecConfigError("speculative decoding needs a pure-MLA target: KDA state cannot roll back "
                              "rejected candidates")
    from dcpctl.runtime.models import load_model  # heavy; import late
    draft = load_model(section.draft_model_path, ParallelState.single(), False, dtype, device)
    _check_vocab(target, draft)
    return SpecDecoder(draft, section.num_draft_tokens, capacity, page_size, dtype, device, lead=lead)


def _check_vocab(target: Any, draft: Any) -> None:
    tv, dv = getattr(target.cfg, "vocab_size", None), draft.cfg.vocab_size
    if tv is not None and tv != dv:
        raise SpecConfigError(f"draft vocab_size ({dv}) != target vocab_size ({tv}): the draft must share "
                              "the target's tokenizer")


class SpecDecoder:
    """Draft model + its replicated KV (allocator with dcp = 1, its own pool) + the verify step."""

    def __init__(self, draft: Any, k: int, capacity_tokens: int, page_size: int, dtype: torch.dtype,
                 device: torch.device, lead: bool = True) -> None:
        self.draft, self.k, self.device, self.lead = draft, k, device, lead
        layers, self.v_dim, row = latent_dims(draft)
        # every rank holds the draft rows of every virtual target token: capacity C * dcp, unsplit
        self.alloc = VirtualAllocator(capacity_tokens, page_size, 1)
        self.pool = KVPool(layers, self.alloc.num_pages * page_size, row, dtype, device)
        self.axis = Axis(None, [0], 0)           # a size-1 DCP axis: no collective ever runs
        self.lens: dict[int, int] = {}           # rid -> draft KV valid for positions < lens[rid]
        self.counters = SpecCounters()

    @property
    def kv_extra(self) -> int:
        return self.k

    def release(self, seq: Sequence, count: bool = True) -> None:
        """Free the draft KV of a finished, cancelled or retracted request (rows counted when it finished)."""
        if seq.rid not in self.lens:
            return
        held = self.lens.pop(seq.rid)
        if count and seq.finish_reason != "abort":
            self.counters.draft_rows += min(held, seq.num_tokens - 1)
        self.alloc.free(seq.rid)
        self.alloc.check_counts()

    # ---- the speculative step: the runner proposes and verifies, the engine accepts ----------------

    def propose(self, seqs: list[Sequence]) -> list[list[int]]:
        """K greedy draft tokens per request; the draft's KV then covers positions < L + K - 1."""
        chunks, ids = [], []
        for s in seqs:
            # grows with the target's held KV (kv_next: L + K, one more than this step writes), so the draft
            # pool, as large as the target's virtual one in pages of P, never runs out first
            self.alloc.allocate(s.rid, s.kv_next())
            self.lens.setdefault(s.rid, 0)
            start, end = self.lens[s.rid], s.num_tokens
            chunks.append(SeqChunk(s.rid, start, end - start))
            ids += s.token_slice(start, end)
        drafts: list[list[int]] = [[] for _ in seqs]
        for i in range(self.k):
            ids = self._draft_forward(chunks, ids)
            for d, t in zip(drafts, ids):
                d.append(t)
            chunks = [SeqChunk(ch.rid, ch.start + ch.num_tokens, 1) for ch in chunks]
        for s in seqs:
            self.lens[s.rid] = s.num_tokens + self.k - 1
        return drafts

    def _draft_forward(self, chunks: list[SeqChunk], ids: list[int]) -> list[int]:
        # chunks' tokens -> the draft's greedy next token after each chunk's last row
        ctx = build_context(self.alloc, self.pool, self.axis, DRAFT_DECISIONS, chunks, self.v_dim)
        hidden = self.draft.forward(to_device(host_ints(ids), self.device), ctx.positions, ctx)
        last = torch.tensor(ctx.layout.q_bounds[1:], dtype=torch.int64, device=hidden.device) - 1
        return greedy(self.draft.logits(hidden.index_select(0, last))).tolist()

    def verify_input(self, seqs: list[Sequence], drafts: list[list[int]]) -> tuple[list[SeqChunk], list[int]]:
        """The verification forward's chunks and ids: K + 1 rows per request at positions L-1 .. L+K-1."""
        chunks = [SeqChunk(s.rid, s.computed, self.k + 1) for s in seqs]
        return chunks, [t for s, d in zip(seqs, drafts) for t in [s.token(s.computed), *d]]

    def accept(self, v: Verification, sampler: Sampler, broadcast: Callable[[list[int]], list[int]],
               record: Callable[[Sequence, int, float], Event]) -> list[Event]:
        """Accept, emit and roll back (module docstring, steps 3 and 4): each request's events."""
        k = self.k
        picks = [self._choose(sampler, v.logits[i * (k + 1):(i + 1) * (k + 1)], s, d)
                 for i, (s, d) in enumerate(zip(v.seqs, v.drafts))]
        toks = broadcast([t for p in picks for t in p[0] + [-1] * (k + 1 - len(p[0]))])
        c = self.counters
        c.target_steps += int(self.lead)
        events = []
        for i, (s, (_, lps)) in enumerate(zip(v.seqs, picks)):
            mine = [t for t in toks[i * (k + 1):(i + 1) * (k + 1)] if t >= 0]
            accepted = len(mine) - 1
            self.lens[s.rid] = min(self.lens[s.rid], s.num_tokens + accepted)
            if self.lead:
                c.proposed, c.accepted = c.proposed + k, c.accepted + accepted
                c.verifications += 1
            events += self._emit(record, s, mine, lps)
        return events

    def _choose(self, sampler: Sampler, logits: Tensor, seq: Sequence,
                draft: list[int]) -> tuple[list[int], list[float]]:
        # logits: [K + 1, V]; row j decides the token after position L-1+j, as plain decode would
        toks: list[int] = []
        lps: list[float] = []
        for j in range(self.k + 1):
            t, lp = sampler(logits[j:j + 1], [seq])
            toks.append(t[0])
            lps.append(lp[0])
            if j == self.k or t[0] != draft[j]:
                break
        return toks, lps

    def _emit(self, record: Callable[[Sequence, int, float], Event], seq: Sequence, toks: list[int],
              lps: list[float]) -> list[Event]:
        events = []
        for tok, lp in zip(toks, lps):
            seq.computed += 1                    # the previous token's target KV is now kept
            if self.lead:
                self.counters.emitted += 1
            events.append(record(seq, tok, lp))  # finishes the request at EOS / max_new_tokens
            if seq.finish_reason:
                break
        return events


def summarize(parts: list[SpecCounters], k: int) -> dict[str, Any]:
    """stats.spec from every rank's counters (in global rank order)."""
    total = SpecCounters(**{f: sum(getattr(p, f) for p in parts) for f in asdict(SpecCounters())})
    return {"algorithm": "STANDALONE", "num_draft_tokens": k, "draft_tokens_proposed": total.proposed,
            "draft_tokens_accepted": total.accepted,
            "acceptance_rate": total.accepted / total.proposed if total.proposed else 0.0,
            "tokens_per_target_step": total.emitted / total.verifications if total.verifications else 0.0,
            "target_verify_steps": total.target_steps,
            "draft_kv_rows_per_rank": [p.draft_rows for p in parts]}
