"""The local MLA decode kernel written in Gluon for Hopper (sm_90): the same contract as `triton_mla`'s
split kernel, with the warp layout chosen by hand.

Why a second kernel: Triton lays the score dot of an attention loop (a dot whose result feeds another
dot) over warps [num_warps, 1].  With 64 heads per program and 8 warps that is two warpgroups of 64 rows
each over a 64-row block, so both warpgroups compute the whole q . k^T (576 deep) and the tensor cores do
1.53x the work of the attention (2 x 576 + 512 against 576 + 512 per head and token); the 64 x 512 fp32
output accumulator, the replicated scores and the q operand then spill ~2 KB per thread (ptxas -v).

Here (64 heads per program, 8 warps = 2 warpgroups):
  scores  S [64, BN]  = q [64, 576] . k^T      warps [4, 2]: each warpgroup owns BN/2 of the tile's tokens
  output  O [64, 512] += P [64, BN] . v        warps [4, 2]: each warpgroup owns 256 of the 512 columns
q lives in shared memory (loaded once), KV tiles stream through a STAGES-deep ring of cp.async copies
(row by row through the page table, zero-filled past the end, so any page size works), P goes through
shared memory to the other warpgroup, and the PV wgmma of tile i runs while tile i+1's copies land.
Scores are kept in base 2; the result is the same normalized (o, lse base e) partial as the Triton kernel.
Only 16-bit pools (fp8 pools stay on the Triton kernel).
"""
from __future__ import annotations

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, \
        warpgroup_mma_init, warpgroup_mma_wait
except ImportError:  # no Triton, or a Triton without Gluon (< 3.5)
    gluon = None


def gluon_available() -> bool:
    return gluon is not None


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
    def _mla_gluon_kernel(Q, KV, BT, LENS, ROWREQ, QPOS, O, LSE,
                          s_qn, s_qh, s_kvp, s_kvs, s_bt, s_oc, s_on, s_oh, s_lc, s_ln, s_lh, HL,
                          H, dcp_rank, dcp_size, qk_scale2, chunk,
                          PAGE: gl.constexpr, D_V: gl.constexpr, D_PE: gl.constexpr, BLOCK_H: gl.constexpr,
                          BLOCK_N: gl.constexpr, STAGES: gl.constexpr, PIPE: gl.constexpr):
        # Q: [N, H, R]  KV: [pages, PAGE, R] -> O: [C, N, HL, D_V], LSE: [C, N, HL]; grid (H/BLOCK_H, splits, N)
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
        SH_V: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
        SH_PE: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
        SH_P: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=BLOCK_N * 2 if BLOCK_N < 64 else 128,
                                                  element_bitwidth=16, rank=2)

        hb, sp, n = gl.program_id(0), gl.program_id(1), gl.program_id(2)
        b = gl.load(ROWREQ + n)
        causal = gl.maximum((gl.load(QPOS + n) - dcp_rank + dcp_size) // dcp_size, 0)
        nvis = gl.minimum(gl.load(LENS + b), causal)
        start = sp * chunk
        end = gl.minimum(start + chunk, nvis)
        n_tiles = gl.cdiv(gl.maximum(end - start, 0), BLOCK_N)

        q_v_s = gl.allocate_shared_memory(dt, [BLOCK_H, D_V], SH_V)
        q_pe_s = gl.allocate_shared_memory(dt, [BLOCK_H, D_PE], SH_PE)
        kv_v_s = gl.allocate_shared_memory(dt, [STAGES, BLOCK_N, D_V], SH_V)
        kv_pe_s = gl.allocate_shared_memory(dt, [STAGES, BLOCK_N, D_PE], SH_PE)
        p_s = gl.allocate_shared_memory(dt, [BLOCK_H, BLOCK_N], SH_P)

        # the first STAGES-1 tiles start loading before q
        for t in gl.static_range(STAGES - 1):
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

        m = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=gl.SliceLayout(1, LS))
        # (the row sums stay [BLOCK_H]: a [BLOCK_H, BLOCK_N] running sum lets ptxas serialize the wgmmas, C7515)
        l_sum = gl.zeros([BLOCK_H], gl.float32, layout=gl.SliceLayout(1, LS))
        acc = warpgroup_mma_init(gl.zeros([BLOCK_H, D_V], gl.float32, layout=LO))   # an async accumulator
        s_zero = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=LS)
        cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, LS))
        if PIPE:
            # scores of tile i+1 run on the tensor cores while this tile's softmax runs (needs STAGES >= 3:
            # tiles i and i+1 are in use while i+2.. land).  cp.async groups: tile t is group t.
            gl.static_assert(STAGES >= 3, "the pipelined loop keeps two tiles in use")
            async_copy.wait_group(STAGES - 2)
            fence_async_shared()         # each thread's generic-proxy writes (cp.async, q) -> async proxy
            gl.thread_barrier()          # ... before any warp's wgmma reads them
            s_tok = warpgroup_mma(q_v_s, kv_v_s.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            s_tok = warpgroup_mma(q_pe_s, kv_pe_s.index(0).permute((1, 0)), s_tok, is_async=True)
            s_cur = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))
            for i in range(n_tiles):
                st = i % STAGES
                nt = (i + 1) % STAGES
                # tile i+1 has landed: its scores run during this tile's softmax (past the end: zeros, discarded)
                async_copy.wait_group(STAGES - 3)
                fence_async_shared()         # each thread's generic-proxy writes (cp.async, q) -> async proxy
                gl.thread_barrier()          # ... before any warp's wgmma reads them
                s_tok = warpgroup_mma(q_v_s, kv_v_s.index(nt).permute((1, 0)), s_zero, use_acc=False,
                                      is_async=True)
                s_tok = warpgroup_mma(q_pe_s, kv_pe_s.index(nt).permute((1, 0)), s_tok, is_async=True)
                s = gl.where((start + i * BLOCK_N + cols < end)[None, :], s_cur * qk_scale2, float("-inf"))
                m_new = gl.maximum(m, gl.max(s, 1))
                p = gl.exp2(s - m_new[:, None])
                alpha = gl.exp2(m - m_new)
                l_sum = l_sum * alpha + gl.sum(p, 1)
                m = m_new
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))    # (done already: a no-op)
                acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, LO))[:, None]
                gl.thread_barrier()      # every warpgroup's PV(i-1) is done with P and tile i-1
                p_s.store(p.to(dt))
                fence_async_shared()
                gl.thread_barrier()
                acc = warpgroup_mma(p_s, kv_v_s.index(st), acc, is_async=True)
                nx = i + STAGES - 1      # into tile i-1's stage
                _load_tile(KV, BT, b, s_bt, s_kvp, s_kvs, start + nx * BLOCK_N, end,
                           kv_v_s.index(nx % STAGES), kv_pe_s.index(nx % STAGES), PAGE, D_V, D_PE, BLOCK_N, LV, LPE)
                # S(i+1) and PV(i) both done: rescaling acc above while any wgmma is in flight makes ptxas
                # serialize every wgmma (C7514), so PV(i) overlaps only the copies issued above
                s_cur = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))
        else:
            for i in range(n_tiles):
                st = i % STAGES
                # this warpgroup's PV of tile i-1 is done; tile i has landed (STAGES-2 younger groups may fly)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
                async_copy.wait_group(STAGES - 2)
                fence_async_shared()         # each thread's generic-proxy writes (cp.async, q) -> async proxy
                gl.thread_barrier()          # ... before any warp's wgmma reads them
                kv_v = kv_v_s.index(st)
                s = warpgroup_mma(q_v_s, kv_v.permute((1, 0)), s_zero, use_acc=False, is_async=True)
                s = warpgroup_mma(q_pe_s, kv_pe_s.index(st).permute((1, 0)), s, is_async=True)
                # while the scores run: the stage of tile i-1 is free, start tile i+STAGES-1 (page-table
                # reads and address math overlap the MMA; an empty group past the end)
                nx = i + STAGES - 1
                _load_tile(KV, BT, b, s_bt, s_kvp, s_kvs, start + nx * BLOCK_N, end, kv_v_s.index(nx % STAGES),
                           kv_pe_s.index(nx % STAGES), PAGE, D_V, D_PE, BLOCK_N, LV, LPE)
                s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
                s = gl.where((start + i * BLOCK_N + cols < end)[None, :], s * qk_scale2, float("-inf"))
                m_new = gl.maximum(m, gl.max(s, 1))
                p = gl.exp2(s - m_new[:, None])
                alpha = gl.exp2(m - m_new)
                l_sum = l_sum * alpha + gl.sum(p, 1)
                m = m_new
                acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, LO))[:, None]
                p_s.store(p.to(dt))
                fence_async_shared()
                gl.thread_barrier()          # both halves of P are written
                acc = warpgroup_mma(p_s, kv_v, acc, is_async=True)
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
