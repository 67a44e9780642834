"""CUDA graphs of the decode step: one graph per (batch size, context bucket) over static buffers.

Captured: the whole step from token ids (the embedding, sync-free), the layer stack (rope, MLA attention
through the paged DCP context, the exchanges, the dense or grouped-MoE MLP, attention-DP gathers of fixed
replica sizes), the final norm and, with `logits=True` (the serving engine), the lm_head with its vocab
gather, then each row's argmax and its log-probability; and (serving) the input ids of requests whose previous
token is still on the device (the engine's pipelined decode: `src`). Left on the host: building the step's
metadata, which goes down as ONE int64 copy per step (plus the block-table changes), and a backend's `refresh`
of what it keeps outside the graphs (`GraphPass.kept`: FlashMLA's tile metadata, remade only when a row's
block count changed).  A backend is told its batch is a graph's, and whether the graph records it
(`PagedLayout.graph`; attention/backends/base.py `capture`).  Buffers, shared by every graph and never
reallocated after capture (a graph of batch B uses their first B rows):

| buffer       | shape                  | per step                                             |
| ------------ | ---------------------- | ---------------------------------------------------- |
| meta         | [5, Bmax + 1] int64    | rows: input ids, positions, local lens, write slots, |
|              |                        | src (the previous replay's row whose argmax is this  |
|              |                        | row's input; -1: the host's id; logits=True only)    |
| sampled_ids  | [Bmax] int64           | logits=True: each row's argmax (the next step's src  |
|              |                        | rows read it before that step writes its own)        |
| sampled      | [Bmax, 2] fp32 (fp64)  | logits=True: the argmax as a float and its logprob   |
| q_pos        | [Bmax] int32           | positions, as the kernel reads them (the graph's     |
|              |                        | first op copies them from meta, as local_lens)       |
| local_lens   | [Bmax + 1] int32       | local_len(position + 1, r, c); pads and the last 0   |
| row_req      | [Bmax] int32           | arange (one query row per request), fixed            |
| block_table  | [Bmax + 1, max_pages]  | row i: chunk i's pages; only changes are written     |
|              |                        | (`block_table.DeviceBlockTable`), stale tails unread |
| write_rows   | [Bmax] int64           | arange, fixed                                        |
| write slots  | meta[3]                | owned rows' slots; rows this rank does not own (and  |
|              |                        | pads) go to `trash_slot`, a spare pool row           |

The kernel gets max_local_len = the graph's context bucket (fixed at capture: no host sync; the splits are
sized for it, so a step picks the smallest bucket that holds its widest request: the buckets grow by 2x up to
max_pages * P).  Under attention DP every replica replays the same batch size (the engine agrees on it; pads
are rows with local length 0), so the MLP's replica gather has fixed sizes.  runtime/graph_capture.py captures
them (off CUDA, in tests, a replay runs the same function eagerly on the same buffers).  The model runner
(engine/model_runner.py) drives them; every call this module makes into the attention backends is in
`_AttentionSeam` below.

    g = DecodeGraphs(model, alloc, pool, decisions, v_dim, batch_sizes, max_pages, trash_slot)   # captures
    out = g.replay(ids, chunks)                  # one decode step: prepare the buffers, then launch the graph
    key = g.prepare(ids, chunks); g.launch(key)  # the same in two calls (a benchmark times the launch alone)
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from dcpctl.contract.launch_config import Decisions
from dcpctl.runtime.attention import backends
from dcpctl.runtime.attention.block_table import DeviceBlockTable
from dcpctl.runtime.attention.dcp import DCPContext
from dcpctl.runtime.attention.layout import SeqChunk, host_ints
from dcpctl.runtime.attention.paged import GraphPass, PagedLayout
from dcpctl.runtime.engine.phases import PREPARE, StepClock, timed
from dcpctl.runtime.graph_capture import Progress, capture_set
from dcpctl.runtime.kv.allocator import VirtualAllocator, local_len, owner, physical, virtual_slot
from dcpctl.runtime.kv.pool import KVPool
from dcpctl.runtime.models.deepseek import Replicas
from dcpctl.runtime.sampling import greedy_rows

# context buckets: max_pages * P, / 2, / 4, ... down to MIN_BUCKET (a bucket much larger than the context
# sizes its splits for rows that are not there and leaves SMs idle)
CONTEXT_GROWTH = 2
MIN_BUCKET = 2048          # local rows: below it one split covers a request in a few blocks anyway


def decode_step(model: Any, ids: Tensor, positions: Tensor, ctx: DCPContext, reps: Any,
                logits: bool) -> Tensor:
    """The model's forward (+ logits) with fixed replica sizes `reps`: what a graph captures."""
    # ids, positions: [B] -> hidden [B, D] (or logits [B, V])
    h = model.forward(ids, positions, ctx, replicas=reps)
    return model.logits(h) if logits else h


def context_buckets(max_rows: int, page: int) -> list[int]:
    """Local-row buckets, ascending: max_rows, max_rows / 2, ... (whole pages, >= MIN_BUCKET)."""
    out, b = [], max_rows
    while True:
        out.append(b)
        b = -(-(b // CONTEXT_GROWTH) // page) * page
        if b < MIN_BUCKET or b >= out[-1]:
            return sorted(out)


class _AttentionSeam:
    """Every call the decode graphs make into the attention layer's backends, in one place: the context a
    graph's step attends through (the selector picks its backend inside, told the batch is a graph's and
    whether the graph records it), which backend that was, and the backend's refresh of what it keeps outside
    the graphs before a replay."""

    def __init__(self, pool: KVPool, dcp: Any, decisions: Decisions, v_dim: int) -> None:
        self.pool, self.dcp, self.decisions, self.v_dim = pool, dcp, decisions, v_dim
        self.kept: dict = {}      # what a backend keeps across captures and replays (GraphPass.kept)

    def context(self, lay: dict[str, Any]) -> DCPContext:
        """The DCP context of one graph's step over the static buffers `lay` (PagedLayout's fields)."""
        d = self.decisions
        # recording: the graph records this call; else eager (a capture's warm-up run, or off CUDA)
        recording = self.pool.kv.is_cuda and torch.cuda.is_current_stream_capturing()
        layout = PagedLayout(**lay, chunks=[], rows_are_chunks=True, graph=GraphPass(self.kept, recording))
        return DCPContext(layout, self.pool, self.dcp, d.dcp_comm_backend, d.lse_base, self.v_dim,
                          attention_backend=d.attention_backend)   # --attention-backend, as eager steps ask

    @staticmethod
    def picked(ctx: DCPContext) -> str | None:
        """The backend the selector picked for the step `ctx` ran (None: no paged attention ran)."""
        return ctx.layout.selected

    def refresh(self, kernel: str | None, host_lens: list[int], lens: Tensor) -> None:
        """Before a replay of a graph that runs `kernel`: its backend remakes what it keeps outside the graph,
        when it must (FlashMLA: its tile metadata, when a row's block count changed)."""
        if kernel is not None:
            backends.get(backends.ABSORBED, kernel).refresh(self.kept, host_lens, lens)


class DecodeGraphs:
    """Decode-step graphs for `batch_sizes` x context buckets (see module docstring)."""

    def __init__(self, model: Any, alloc: VirtualAllocator, pool: KVPool, decisions: Decisions, v_dim: int,
                 batch_sizes: list[int], max_pages: int, trash_slot: int, logits: bool = False,
                 buckets: bool = False, progress: Progress | None = None) -> None:
        self.model, self.alloc, self.logits = model, alloc, logits
        self.c, self.rank = alloc.dcp, model.ps.dcp.rank
        self.page = alloc.page_tokens // alloc.dcp
        self.max_pages, self.trash = max_pages, trash_slot
        self.dp, self.dp_index = model.ps.attn_dp_size, getattr(model.ps, "attn_dp_index", 0)
        self.attention = _AttentionSeam(pool, model.ps.dcp, decisions, v_dim)
        self._buffers(pool.kv, max(batch_sizes), max_pages, trash_slot)
        top = max_pages * self.page
        self.buckets = context_buckets(top, self.page) if buckets else [top]
        self.sizes = sorted(batch_sizes)
        self.kernels: dict[tuple[int, int], str] = {}   # (batch, bucket) -> the local attention kernel
        self.cuda = pool.kv.is_cuda      # off CUDA (tests): replay runs the same step eagerly on the buffers
        keys = [(b, L) for b in reversed(self.sizes) for L in reversed(self.buckets)]   # largest first
        done = capture_set(keys, lambda key: lambda: self._run(*key), pool.kv.device, progress)
        self.graphs, self.capture_s = done.pieces, done.capture_s   # a warm-up run writes only the trash slot

    def _buffers(self, kv: Tensor, bmax: int, max_pages: int, trash_slot: int) -> None:
        # the module table's static buffers, on the pool's device
        dev = kv.device
        i32 = dict(dtype=torch.int32, device=dev)
        self.meta = torch.zeros(5, bmax + 1, dtype=torch.int64, device=dev)
        self.meta[3].fill_(trash_slot)
        self.meta[4].fill_(-1)
        self.ids, self.positions = self.meta[0, :bmax], self.meta[1, :bmax]
        self.write_slots = self.meta[3, :bmax]
        self.src = self.meta[4, :bmax]
        self.sampled_ids = torch.zeros(bmax, dtype=torch.int64, device=dev)
        acc = torch.float64 if kv.dtype == torch.float64 else torch.float32   # chosen_logprobs' dtype
        self.sampled = torch.zeros(bmax, 2, dtype=acc, device=dev)   # rows: one contiguous copy to the host
        # rows: q_pos, local_lens (meta rows 1, 2 as int32), each row 16-byte aligned, as the kernels like
        self.int32 = torch.zeros(2, -(-(bmax + 1) // 4) * 4, **i32)
        self.q_pos = self.int32[0, :bmax]
        self.row_req = torch.arange(bmax, **i32)
        self.block_table = torch.zeros(bmax + 1, max_pages, **i32)
        self.table = DeviceBlockTable(self.block_table)
        self.local_lens = self.int32[1, :bmax + 1]
        self.write_rows = torch.arange(bmax, dtype=torch.int64, device=dev)

    def _replicas(self, b: int) -> Replicas | None:
        return None if self.dp == 1 else Replicas([b] * self.dp, b * self.dp_index, b)

    def _context(self, b: int, rows: int) -> DCPContext:
        return self.attention.context(dict(
            positions=self.positions[:b], q_pos=self.q_pos[:b], row_req=self.row_req[:b],
            block_table=self.block_table[:b + 1], local_lens=self.local_lens[:b + 1],
            write_rows=self.write_rows[:b], write_slots=self.write_slots[:b], max_local_len=rows,
            page_size=self.page))

    def int32_columns(self, b: int) -> None:
        """q_pos and local_lens from meta, as the kernels read them: the graph's first op, one copy of both
        rows (q_pos gets row b too, which no kernel of batch b reads)."""
        self.int32[:, :b + 1].copy_(self.meta[1:3, :b + 1])

    def _run(self, b: int, rows: int) -> Tensor:
        # what a graph captures: the step of batch b at context bucket `rows`, from the static buffers
        self.int32_columns(b)
        ids = self.ids[:b]
        if self.logits:   # a pending row's input is the previous replay's argmax, still on the device
            src = self.src[:b]
            ids = torch.where(src >= 0, self.sampled_ids[src.clamp(min=0)], ids)
        ctx = self._context(b, rows)
        out = decode_step(self.model, ids, self.positions[:b], ctx, self._replicas(b), self.logits)
        kernel = self.attention.picked(ctx)
        if kernel is not None:
            self.kernels[(b, rows)] = kernel
        if self.logits:
            top, both = greedy_rows(out)
            self.sampled_ids[:b].copy_(top)
            self.sampled[:b].copy_(both.t())
        return out

    def graph_size(self, n: int) -> int:
        fits = [b for b in self.sizes if b >= n]
        if not fits:
            raise ValueError(f"decode batch ({n}) > largest captured batch size ({self.sizes[-1]})")
        return fits[0]

    def bucket(self, rows: int) -> int:
        fits = [L for L in self.buckets if L >= rows]
        if not fits:
            raise ValueError(f"a request's local context ({rows} rows) > the graphs' widest "
                             f"({self.buckets[-1]})")
        return fits[0]

    def prepare(self, ids: Tensor | list[int], chunks: list[SeqChunk], size: int | None = None,
                src: list[int] | None = None) -> tuple[int, int]:
        """Fill the static buffers for one decode step (one token per chunk); returns the graph's key.

        size: the batch size to replay (attention DP: the one every replica agreed on), else the smallest fit.
        src (logits=True only): row i's input id is row src[i] of the previous replay's `sampled_ids` where
        src[i] >= 0 (a token still on the device: the engine's pipelined decode), else ids[i]."""
        # O(batch + new pages) host work: one int64 copy of the metadata; the table writes only what changed
        if src is not None and not self.logits:
            raise ValueError("src rows read the previous replay's argmax: only graphs with logits=True "
                             "make one")
        n = len(chunks)
        b = self.graph_size(max(n, size or 0))
        pos = [ch.start for ch in chunks] + [0] * (b - n)
        lens = [local_len(p + 1, self.rank, self.c) for p in pos[:n]] + [0] * (b - n + 1)
        slots = [self.trash] * (b + 1)
        rows = []
        for i, ch in enumerate(chunks):
            pages = self.alloc.pages(ch.rid)          # the live list, not a copy: indexing is O(1)
            rows.append((i, ch.rid, self.alloc.pages_for(ch.start + 1), pages))
            if owner(ch.start, self.c) == self.rank:
                slots[i] = physical(virtual_slot(pages, ch.start, self.alloc.page_tokens), self.c)
        self.table.update(rows)
        ids = ids.tolist() if isinstance(ids, Tensor) else list(ids)
        host = host_ints(ids + [0] * (b + 1 - n) + pos + [0] + lens + slots
                         + (src if src is not None else [-1] * n) + [-1] * (b + 1 - n)).view(5, b + 1)
        if self.cuda:     # pinned: the copy is queued behind the step in flight; the host does not wait
            host = host.pin_memory()
        self.meta[:, :b + 1].copy_(host, non_blocking=self.cuda)
        key = (b, self.bucket(max(lens)))
        self.attention.refresh(self.kernels.get(key), lens[:b], self.meta[2, :b])
        return key

    def launch(self, key: tuple[int, int], clock: StepClock | None = None) -> Tensor:
        """Replay the graph of `key` over the buffers as prepare left them: its whole output (a view)."""
        piece = self.graphs[key]
        if piece.graph is None:          # off CUDA: the same step, eagerly
            return piece.run()
        if clock is None:
            piece.graph.replay()
        else:
            clock.launch(piece.graph)
        return piece.out

    def replay(self, ids: Tensor | list[int], chunks: list[SeqChunk], size: int | None = None,
               src: list[int] | None = None, clock: StepClock | None = None) -> Tensor:
        """One decode step: [n, D] hidden after the final norm, or [n, V] logits (a view of the graph's
        output; with logits, `sampled_ids[:n]` / `sampled[:n]` hold each row's greedy choice until the next
        replay). clock: the step trace's timing hooks (engine/phases.py), or None."""
        if any(ch.num_tokens != 1 for ch in chunks):
            raise ValueError("CUDA graphs replay decode steps only (one token per request)")
        key = timed(clock, PREPARE, self.prepare, ids, chunks, size, src)
        return self.launch(key, clock)[:len(chunks)]
