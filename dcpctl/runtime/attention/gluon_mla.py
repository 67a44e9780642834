"""The local MLA decode kernel written in Gluon for Hopper (sm_90): the same contract as `triton_mla`'s
split kernel, with the warp layout chosen by hand.

Why a second kernel: Triton lays the score dot of an attention loop (a dot whose result feeds another
dot) over warps [num_warps, 1].  With 64 heads per program and 8 warps that is two warpgroups of 64 rows
each over a 64-row block, so both warpgroups compute the whole q . k^T (576 deep) and the tensor cores do
1.53x the work of the attention (2 x 576 + 512 against 576 + 512 per head and token); the 64 x 512 fp32
output accumulator, the replicated scores and q fill 255 registers and spill (tools/ptxas_report.py).

Here (64 heads per program, 8 warps = 2 warpgroups):
  scores  S [64, BN]  = q [64, 576] . k^T      warps [4, 2]: each warpgroup owns BN/2 of the tile's tokens
  output  O [64, 512] += P [64, BN] . v        warps [4, 2]: each warpgroup owns 256 of the 512 columns
q lives in shared memory (loaded once); KV tiles stream through a STAGES-deep ring: whole in-page tiles
by bulk tensor copy (one mbarrier per stage) when PAGE % BLOCK_N == 0, otherwise (and for the partial last
tile) by cp.async row by row through the page table, zero-filled past the end.  P goes through shared
memory to the other warpgroup; each tile waits for the previous tile's PV wgmma (overlapping them made
ptxas serialize every wgmma, C7514).  Scores are kept in base 2; the result is the same normalized
(o, lse base e) partial as the Triton kernel.  Only 16-bit pools (fp8 pools stay on the Triton kernel),
and only the Triton versions it was written against (Gluon's API changes between releases: in 3.9 the
copy entry points used here are removed).
"""
from __future__ import annotations

TESTED_TRITON = ((3, 6),)     # the Gluon API this kernel compiles with (3.6.0 measured; 3.5 lacks
                              # gl.num_warps, 3.9 the copy calls)

UNAVAILABLE: str | None = None   # why the Gluon kernel cannot be built with this Triton (None: it can)
try:
    import triton
    if tuple(int(x) for x in triton.__version__.split(".")[:2]) not in TESTED_TRITON:
        raise ImportError(f"Triton {triton.__version__} is installed; the kernel is written for "
                          + ", ".join(f"{a}.{b}" for a, b in TESTED_TRITON))
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, \
        warpgroup_mma, warpgroup_mma_init, warpgroup_mma_wait
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from dcpctl.runtime.attention.kernel_rows import visible_range
except (ImportError, ValueError) as e:  # no Triton, a Triton without Gluon (< 3.5), or an untested Gluon API
    gluon = None
    UNAVAILABLE = ("Triton is not installed" if getattr(e, "name", None) == "triton" else str(e)
                   if "is installed" in str(e) else f"this Triton lacks the Gluon API the kernel uses ({e})")


def gluon_available() -> bool:
    return gluon is not None


def smem_bytes(block_h: int, block_n: int, stages: int, row: int) -> int:
    """Shared memory the kernel allocates: q, the ring of KV tiles, P, and ~1 KB of barriers and
    reduction scratch (ptxas: 229,904 B at 64 x 64 x 2 stages, R = 576)."""
    return 2 * (block_h * row + stages * block_n * row + block_h * block_n) + 1024


if gluon is not None:
    @gluon.jit
    def _load_tile(KV, BT, b, s_bt, s_kvp, s_kvs, s0, end, kv_v, kv_pe,
                   PAGE: gl.constexpr, D_V: gl.constexpr, D_PE: gl.constexpr, BLOCK_N: gl.constexpr,
                   LV: gl.constexpr, LPE: gl.constexpr):
        # cp.async of local rows [s0, s0 + BLOCK_N) into one ring stage (kv_v [BN, D_V], kv_pe [BN, D_PE]);
        # rows at or past `end` are zero-filled and read nothing
        offs_j = s0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, LV))
        jmask = offs_j < end
        page = gl.load(BT + b * s_bt + offs_j // PAGE, mask=jmask, other=0).to(gl.int64)
        row = KV + page * s_kvp + (offs_j % PAGE) * s_kvs
        cols = gl.arange(0, D_V, layout=gl.SliceLayout(0, LV))
        async_copy.async_copy_global_to_shared(kv_v, row[:, None] + cols[None, :], mask=jmask[:, None])
        offs_j2 = s0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, LPE))
        jmask2 = offs_j2 < end
        page2 = gl.load(BT + b * s_bt + offs_j2 // PAGE, mask=jmask2, other=0).to(gl.int64)
        row2 = KV + page2 * s_kvp + (offs_j2 % PAGE) * s_kvs
        cols2 = D_V + gl.arange(0, D_PE, layout=gl.SliceLayout(0, LPE))
        async_copy.async_copy_global_to_shared(kv_pe, row2[:, None] + cols2[None, :], mask=jmask2[:, None])
        async_copy.commit_group()

    @gluon.jit
    def _tma_tile(KVD_V, KVD_PE, BT, b, s_bt, s0, bar, kv_v, kv_pe, pred, PAGE: gl.constexpr,
                  D_V: gl.constexpr):
        # bulk tensor copies of local rows [s0, s0 + BLOCK_N) (inside one page) into one ring stage;
        # `bar` completes when both have landed
        page = gl.load(BT + b * s_bt + s0 // PAGE, mask=pred, other=0)
        row = page * PAGE + s0 % PAGE
        mbarrier.expect(bar, KVD_V.block_type.nbytes + KVD_PE.block_type.nbytes, pred=pred)
        tma.async_copy_global_to_shared(KVD_V, [row, 0], bar, kv_v, pred=pred)
        tma.async_copy_global_to_shared(KVD_PE, [row, D_V], bar, kv_pe, pred=pred)

    @gluon.jit
    def _attend_tile(q_v_s, q_pe_s, kv_v, kv_pe, p_s, acc, m, l_sum, s0, end, qk_scale2,
                     BLOCK_H: gl.constexpr, BLOCK_N: gl.constexpr, LS: gl.constexpr, LO: gl.constexpr):
        # one landed tile: S = q . k^T (warpgroup w: tokens [w*BN/2, (w+1)*BN/2)), online softmax in base 2,
        # P through shared memory, then O += P . v issued (asynchronous: the caller waits before the next
        # tile)
        s = warpgroup_mma(q_v_s, kv_v.permute((1, 0)), gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=LS),
                          use_acc=False, is_async=True)
        s = warpgroup_mma(q_pe_s, kv_pe.permute((1, 0)), s, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        cols = s0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, LS))
        s = gl.where((cols < end)[None, :], s * qk_scale2, float("-inf"))
        m_new = gl.maximum(m, gl.max(s, 1))
        p = gl.exp2(s - m_new[:, None])
        alpha = gl.exp2(m - m_new)
        # the row sums stay [BLOCK_H]: a [BLOCK_H, BLOCK_N] running sum lets ptxas serialize the wgmmas
        # (C7515)
        l_sum = l_sum * alpha + gl.sum(p, 1)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, LO))[:, None]
        p_s.store(p.to(p_s.dtype))
        fence_async_shared()
        gl.thread_barrier()              # both warpgroups' halves of P are written
        acc = warpgroup_mma(p_s, kv_v, acc, is_async=True)
        return acc, m_new, l_sum

    @gluon.jit
    def _mla_gluon_kernel(Q, KV, KVD_V, KVD_PE, BT, LENS, ROWREQ, QPOS, O, LSE,  # noqa: E741
                          s_qn, s_qh, s_kvp, s_kvs, s_bt, s_oc, s_on, s_oh, s_lc, s_ln, s_lh, HL,
                          H, dcp_rank, dcp_size, qk_scale2,
                          PAGE: gl.constexpr, D_V: gl.constexpr, D_PE: gl.constexpr, BLOCK_H: gl.constexpr,
                          BLOCK_N: gl.constexpr, STAGES: gl.constexpr, USE_TMA: gl.constexpr,
                          PDL: gl.constexpr):
        # Q: [N, H, R]  KV: [pages, PAGE, R] -> O: [C, N, HL, D_V], LSE: [C, N, HL]; grid (H/BLOCK_H, splits,
        # N) head h of split sp lands in block sp + h // HL (splits > 1: HL = H, one block per split)
        # USE_TMA (PAGE % BLOCK_N == 0): whole tiles by bulk tensor copy (KVD_V/KVD_PE over the pool's rows),
        # the partial last tile by cp.async; else every tile by cp.async, row by row through the page table
        gl.static_assert(BLOCK_H == 64, "one wgmma row block of heads per program")
        gl.static_assert(gl.num_warps() == 8, "two warpgroups")
        dt: gl.constexpr = KV.dtype.element_ty
        # register layouts: S and O as wgmma results, loads 16 B per thread along the row
        LS: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                     instr_shape=[16, BLOCK_N // 2, 16])
        LO: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                     instr_shape=[16, D_V // 2, 16])
        LV: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [8, 1], [1, 0])
        LPE: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D_PE, D_PE // 8], [8, 1], [1, 0])
        SH: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
        SH_P: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=BLOCK_N * 2 if BLOCK_N < 64 else 128,
                                                  element_bitwidth=16, rank=2)

        if PDL:   # launched early (runtime/kernels/pdl.py): wait for the kernel before, then release the next
            gl.inline_asm_elementwise("griddepcontrol.wait; // dummy $0", "=r", [], dtype=gl.int32,
                                      is_pure=False, pack=1)
            gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // dummy $0", "=r", [],
                                      dtype=gl.int32, is_pure=False, pack=1)
        hb, sp, n = gl.program_id(0), gl.program_id(1), gl.program_id(2)
        b, start, end = visible_range(ROWREQ, QPOS, LENS, n, sp, gl.num_programs(1), BLOCK_N, dcp_rank,
                                      dcp_size)
        n_tiles = gl.cdiv(gl.maximum(end - start, 0), BLOCK_N)

        q_v_s = gl.allocate_shared_memory(dt, [BLOCK_H, D_V], SH)
        q_pe_s = gl.allocate_shared_memory(dt, [BLOCK_H, D_PE], SH)
        kv_v_s = gl.allocate_shared_memory(dt, [STAGES, BLOCK_N, D_V], SH)
        kv_pe_s = gl.allocate_shared_memory(dt, [STAGES, BLOCK_N, D_PE], SH)
        p_s = gl.allocate_shared_memory(dt, [BLOCK_H, BLOCK_N], SH_P)

        if USE_TMA:
            n_full = gl.maximum(end - start, 0) // BLOCK_N
            bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
            for t in gl.static_range(STAGES):
                mbarrier.init(bars.index(t), count=1)
            for t in gl.static_range(STAGES - 1):
                _tma_tile(KVD_V, KVD_PE, BT, b, s_bt, start + t * BLOCK_N, bars.index(t), kv_v_s.index(t),
                          kv_pe_s.index(t), t < n_full, PAGE, D_V)
        else:
            n_full = 0
            for t in gl.static_range(STAGES - 1):      # the first STAGES-1 tiles start loading before q
                _load_tile(KV, BT, b, s_bt, s_kvp, s_kvs, start + t * BLOCK_N, end, kv_v_s.index(t),
                           kv_pe_s.index(t), PAGE, D_V, D_PE, BLOCK_N, LV, LPE)

        offs_hq = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, LV))
        q_row = Q + n.to(gl.int64) * s_qn + offs_hq[:, None] * s_qh
        q_v_s.store(gl.load(q_row + gl.arange(0, D_V, layout=gl.SliceLayout(0, LV))[None, :],
                            mask=(offs_hq < H)[:, None], other=0.0))
        offs_hp = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, LPE))
        q_rowp = Q + n.to(gl.int64) * s_qn + offs_hp[:, None] * s_qh
        q_pe_s.store(gl.load(q_rowp + D_V + gl.arange(0, D_PE, layout=gl.SliceLayout(0, LPE))[None, :],
                             mask=(offs_hp < H)[:, None], other=0.0))
        fence_async_shared()
        gl.thread_barrier()                  # q (and the barriers' init) before any wgmma / wait

        m = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=gl.SliceLayout(1, LS))
        l_sum = gl.zeros([BLOCK_H], gl.float32, layout=gl.SliceLayout(1, LS))
        acc = warpgroup_mma_init(gl.zeros([BLOCK_H, D_V], gl.float32, layout=LO))   # an async accumulator
        if USE_TMA:
            for i in range(n_full):
                st = i % STAGES
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))   # this warpgroup's PV(i-1)
                gl.thread_barrier()          # ... and the other's: tile i-1's stage and P are free
                nx = i + STAGES - 1
                _tma_tile(KVD_V, KVD_PE, BT, b, s_bt, start + nx * BLOCK_N, bars.index(nx % STAGES),
                          kv_v_s.index(nx % STAGES), kv_pe_s.index(nx % STAGES), nx < n_full, PAGE, D_V)
                mbarrier.wait(bars.index(st), (i // STAGES) & 1)
                acc, m, l_sum = _attend_tile(q_v_s, q_pe_s, kv_v_s.index(st), kv_pe_s.index(st), p_s, acc, m,
                                             l_sum, start + i * BLOCK_N, end, qk_scale2, BLOCK_H, BLOCK_N, LS,
                                             LO)
        for i in range(n_full, n_tiles):     # cp.async tiles: all of them, or the partial last one after TMA
            st = i % STAGES
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            if USE_TMA:                      # nothing was prefetched for it
                gl.thread_barrier()
                _load_tile(KV, BT, b, s_bt, s_kvp, s_kvs, start + i * BLOCK_N, end, kv_v_s.index(st),
                           kv_pe_s.index(st), PAGE, D_V, D_PE, BLOCK_N, LV, LPE)
                async_copy.wait_group(0)
            else:                            # tile i has landed (STAGES-2 younger groups may fly)
                async_copy.wait_group(STAGES - 2)
            fence_async_shared()             # each thread's cp.async writes -> the wgmma's async proxy
            gl.thread_barrier()              # ... before any warp reads them; every warpgroup's PV(i-1) is
                                             # done
            if not USE_TMA:                  # the stage of tile i-1 is free: start tile i+STAGES-1
                nx = i + STAGES - 1          # (an empty group past the end)
                _load_tile(KV, BT, b, s_bt, s_kvp, s_kvs, start + nx * BLOCK_N, end,
                           kv_v_s.index(nx % STAGES), kv_pe_s.index(nx % STAGES), PAGE, D_V, D_PE, BLOCK_N,
                           LV, LPE)
            acc, m, l_sum = _attend_tile(q_v_s, q_pe_s, kv_v_s.index(st), kv_pe_s.index(st), p_s, acc, m,
                                         l_sum, start + i * BLOCK_N, end, qk_scale2, BLOCK_H, BLOCK_N, LS, LO)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        async_copy.wait_group(0)

        seen = l_sum > 0
        inv = gl.convert_layout(gl.where(seen, 1.0 / gl.where(seen, l_sum, 1.0), 0.0), gl.SliceLayout(1, LO))
        o = acc * inv[:, None]
        lse = gl.where(seen, (m + gl.log2(gl.where(seen, l_sum, 1.0))) * 0.6931471805599453, float("-inf"))
        offs_h = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, LO))
        offs_v = gl.arange(0, D_V, layout=gl.SliceLayout(0, LO))
        blk = (sp + offs_h // HL).to(gl.int64)
        hl = (offs_h % HL).to(gl.int64)
        o_ptr = O + blk[:, None] * s_oc + n.to(gl.int64) * s_on + hl[:, None] * s_oh + offs_v[None, :]
        gl.store(o_ptr, o.to(O.dtype.element_ty), mask=(offs_h < H)[:, None])
        offs_hl = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, LS))
        blk_l = (sp + offs_hl // HL).to(gl.int64)
        gl.store(LSE + blk_l * s_lc + n.to(gl.int64) * s_ln + (offs_hl % HL).to(gl.int64) * s_lh,
                 lse.to(LSE.dtype.element_ty), mask=offs_hl < H)


def tma_descriptors(kv_pool, block_n: int, v_dim: int):
    """Bulk-copy descriptors over the pool's rows ([pages * PAGE, R]): the v part and the rope part of a
    block_n-row tile, in the kernel's shared layout."""
    flat = kv_pool.view(-1, kv_pool.shape[-1])
    layout = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    return (TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [block_n, v_dim], layout),
            TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [block_n, flat.shape[1] - v_dim],
                             layout))
