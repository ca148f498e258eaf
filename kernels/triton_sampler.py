"""Fused Triton rejection sampler: two kernels over raw logits, no [B, K+1, V] probability tensor.

_stats_kernel, one row per (b, i) position, i <= num_draft[b]:
    pass 1 over V tiles: guidance combine, temperature, online max / argmax / sum-exp (softmax stats);
    then p(x) and q(x) of the draft by single loads;
    pass 2 over V tiles (only with draft_probs, only at drafted positions): overlap sum_v min(p, q) and
    the check that q is a distribution.
_accept_sample_kernel, one row per b:
    the acceptance chain u * q(x) <= p(x) over the drafts, then one exponential race over V at the single
    position that emits a token: the residual max(p - q, 0) at the first rejection, or p for the bonus.
    The race draws randomness only for B*V elements, not B*(K+1)*V.

Rows are processed in blocks [BLOCK_R, BLOCK_V]: one row per program for large V, many for small V.
All random numbers come from Philox keyed by one seed drawn from the caller's generator, with counters
(vocab index or position, batch row, stream): every decision gets its own independent draw.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from . import sampler
from .sampler import Q_SUM_TOL
from .types import SampleOutput

# globals read inside @triton.jit functions must be constexpr
BAD_TARGET = tl.constexpr(sampler.BAD_TARGET)
BAD_UNCOND = tl.constexpr(sampler.BAD_UNCOND)
ALL_MASKED = tl.constexpr(sampler.ALL_MASKED)
BAD_Q = tl.constexpr(sampler.BAD_Q)
BAD_ID = tl.constexpr(sampler.BAD_ID)
STREAM_ACCEPT = tl.constexpr(0)
STREAM_RACE = tl.constexpr(1)
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
# Tiles stay well below next_pow2(V) on a GPU (register pressure); the interpreter runs each program
# in numpy, where wide tiles and many rows per program are what make it fast.
MAX_TILE = 1 << 16 if INTERPRET else 4096


@triton.jit
def _guided(c_row, u_row, cols, mask, g, HAS_UNCOND: tl.constexpr):
    """Load fp32 logits at cols and apply u + g*(c - u); -inf in either branch stays -inf."""
    c = tl.load(c_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
    if HAS_UNCOND:
        u = tl.load(u_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        masked = (c == float("-inf")) | (u == float("-inf"))
        cs = tl.where(masked, 0.0, c)  # no -inf - -inf = NaN, even in lanes thrown away
        us = tl.where(masked, 0.0, u)
        guided = tl.where(masked, float("-inf"), us + g * (cs - us))
        return c, u, tl.where(g == 1.0, c, guided)
    return c, c, c


@triton.jit
def _uniform_open(bits):
    """uint32 -> fp32 uniform on (0, 1): -log of it is a finite, positive Exp(1) draw.

    23 bits, so that k + 0.5 is exact in fp32: with 24, the top value rounds to 1.0 and E = 0.
    """
    return ((bits >> 9).to(tl.float32) + 0.5) * (1.0 / 8388608.0)


@triton.jit
def _uniform_left_open(bits):
    """uint32 -> fp32 uniform on (0, 1]: u = 0 would accept a draft with p = 0."""
    return 1.0 - (bits >> 8).to(tl.float32) * (1.0 / 16777216.0)


# fmt: off
@triton.jit
def _stats_kernel(
    c_ptr, u_ptr, q_ptr, ids_ptr, n_ptr, t_ptr, g_ptr,  # inputs
    m_ptr, s_ptr, a_ptr, px_ptr, qx_ptr, ov_ptr, flag_ptr,  # outputs, [B*(K+1)]
    R, K, V,
    c_sb, c_si, u_sb, u_si, q_sb, q_si, ids_sb,
    Q_TOL: tl.constexpr,
    HAS_UNCOND: tl.constexpr, HAS_Q: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: on
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < R
    b = (rows // (K + 1)).to(tl.int64)
    i = rows % (K + 1)
    n = tl.load(n_ptr + b, mask=row_ok, other=0)
    live = row_ok & (i <= n)  # positions past the emitted token are never read
    drafted = live & (i < n)
    t = tl.load(t_ptr + b, mask=row_ok, other=1.0)
    g = tl.load(g_ptr + b, mask=row_ok, other=1.0)[:, None]
    greedy = t == 0.0
    t_div = tl.where(greedy, 1.0, t)[:, None]
    c_row = (c_ptr + b * c_sb + i * c_si)[:, None]
    u_row = (u_ptr + b * u_sb + i * u_si)[:, None]

    # pass 1: online softmax statistics of z = guided / t; argmax with the first index winning ties
    m = tl.full([BLOCK_R], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_R], tl.float32)
    a = tl.zeros([BLOCK_R], tl.int32)
    bad_c = tl.zeros([BLOCK_R], tl.int32)
    bad_u = tl.zeros([BLOCK_R], tl.int32)
    for v0 in range(0, V, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        mask = live[:, None] & (cols < V)[None, :]
        c, u, logit = _guided(c_row, u_row, cols[None, :], mask, g, HAS_UNCOND)
        bad_c |= tl.max(((c != c) | (c == float("inf"))).to(tl.int32), axis=1)
        if HAS_UNCOND:
            bad_u |= tl.max(((u != u) | (u == float("inf"))).to(tl.int32), axis=1)
        z = logit / t_div
        tile_max = tl.max(z, axis=1)
        tile_arg = tl.argmax(z, axis=1, tie_break_left=True) + v0
        a = tl.where(tile_max > m, tile_arg, a)
        new_m = tl.maximum(m, tile_max)
        shift = tl.where(new_m == float("-inf"), 0.0, new_m)  # an all -inf prefix adds exp(-inf) = 0
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(z - shift[:, None]), axis=1)
        m = new_m

    m_safe = tl.where(m == float("-inf"), 0.0, m)  # rows not computed (or flagged) stay NaN-free
    s_safe = tl.where(s > 0.0, s, 1.0)

    # the draft's own p and q: single loads, with padded or out-of-range ids masked off
    x = tl.load(ids_ptr + b * ids_sb + i, mask=drafted, other=0)
    x_ok = (x >= 0) & (x < V)
    xm = drafted & x_ok
    x = tl.where(xm, x, 0)
    _, _, lx = _guided(c_row, u_row, x[:, None], xm[:, None], g, HAS_UNCOND)
    zx = tl.sum(lx, axis=1) / tl.sum(t_div, axis=1)
    px = tl.where(greedy, (x == a).to(tl.float32), tl.exp(zx - m_safe) / s_safe)
    px = tl.where(xm, px, 0.0)
    q_row = (q_ptr + b * q_sb + i * q_si)[:, None]
    if HAS_Q:
        qx = tl.sum(tl.load(q_row + x[:, None], mask=xm[:, None], other=0.0), axis=1)
    else:
        qx = tl.where(xm, 1.0, 0.0)

    # pass 2: overlap sum_v min(p, q), and whether q is a distribution
    bad_q = tl.zeros([BLOCK_R], tl.int32)
    if HAS_Q:
        ov = tl.zeros([BLOCK_R], tl.float32)
        q_sum = tl.zeros([BLOCK_R], tl.float32)
        for v0 in range(0, V, BLOCK_V):
            cols = v0 + tl.arange(0, BLOCK_V)
            mask = drafted[:, None] & (cols < V)[None, :]
            _, _, logit = _guided(c_row, u_row, cols[None, :], mask, g, HAS_UNCOND)
            p = tl.where(
                greedy[:, None],
                (cols[None, :] == a[:, None]).to(tl.float32),
                tl.exp(logit / t_div - m_safe[:, None]) / s_safe[:, None],
            )
            q = tl.load(q_row + cols[None, :], mask=mask, other=0.0)
            ov += tl.sum(tl.where(mask, tl.minimum(p, q), 0.0), axis=1)
            q_sum += tl.sum(q, axis=1)
            bad_q |= tl.max(((q != q) | (q < 0.0) | (q == float("inf"))).to(tl.int32), axis=1)
        bad_q |= (tl.abs(q_sum - 1.0) > Q_TOL).to(tl.int32)
    else:
        ov = px

    flags = bad_c * BAD_TARGET + bad_u * BAD_UNCOND + (m == float("-inf")).to(tl.int32) * ALL_MASKED
    flags += (drafted & ~x_ok).to(tl.int32) * BAD_ID + (bad_q * BAD_Q) * drafted.to(tl.int32)
    tl.store(flag_ptr + rows, tl.where(live, flags, 0), mask=row_ok)
    tl.store(m_ptr + rows, m, mask=row_ok)
    tl.store(s_ptr + rows, s, mask=row_ok)
    tl.store(a_ptr + rows, a, mask=row_ok)
    tl.store(px_ptr + rows, px, mask=row_ok)
    tl.store(qx_ptr + rows, qx, mask=row_ok)
    tl.store(ov_ptr + rows, tl.where(drafted, ov, float("nan")), mask=row_ok)


# fmt: off
@triton.jit
def _accept_sample_kernel(
    c_ptr, u_ptr, q_ptr, ids_ptr, n_ptr, t_ptr, g_ptr, seed_ptr,  # inputs
    m_ptr, s_ptr, a_ptr, px_ptr, qx_ptr,  # from _stats_kernel, [B, K+1]
    tokens_ptr, num_acc_ptr, acc_prob_ptr, res_pos_ptr,  # outputs
    B, K, V,
    c_sb, c_si, u_sb, u_si, q_sb, q_si, ids_sb,
    HAS_UNCOND: tl.constexpr, HAS_Q: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: on
    b = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    b_ok = b < B
    b = b.to(tl.int64)
    seed = tl.load(seed_ptr)
    n = tl.load(n_ptr + b, mask=b_ok, other=0)
    t = tl.load(t_ptr + b, mask=b_ok, other=1.0)
    g = tl.load(g_ptr + b, mask=b_ok, other=1.0)[:, None]
    greedy = t == 0.0

    # the acceptance chain over positions 0..n-1
    k = tl.arange(0, BLOCK_K)[None, :]
    drafted = b_ok[:, None] & (k < n[:, None])
    stat = b[:, None] * (K + 1) + k
    px = tl.load(px_ptr + stat, mask=drafted, other=0.0)
    qx = tl.load(qx_ptr + stat, mask=drafted, other=1.0)
    x = tl.load(ids_ptr + b[:, None] * ids_sb + k, mask=drafted, other=-1)
    kk = k + 0 * b[:, None]  # Philox counters at full tile shape
    bits, _, _, _ = tl.philox(seed, kk.to(tl.uint32), (b[:, None] + 0 * k).to(tl.uint32), STREAM_ACCEPT, 0)
    u = _uniform_left_open(bits)
    accepted = drafted & (px > 0.0) & (greedy[:, None] | (u * qx <= px))
    j = tl.min(tl.where(drafted & ~accepted, k, BLOCK_K), axis=1)
    j = tl.minimum(j, n)  # number accepted; the emitted token goes to position j
    rejected = j < n

    ratio = tl.where(qx > 0.0, tl.minimum(px / qx, 1.0), (px > 0.0).to(tl.float32))
    pmask = b_ok[:, None] & (k < K)
    tl.store(acc_prob_ptr + b[:, None] * K + k, tl.where(drafted, ratio, float("nan")), mask=pmask)
    tl.store(num_acc_ptr + b, j.to(tl.int64), mask=b_ok)
    tl.store(res_pos_ptr + b, tl.where(rejected, j, -1).to(tl.int64), mask=b_ok)

    # one exponential race at position j: argmax_v w(v) / E_v with E_v ~ Exp(1) draws v with prob ∝ w(v)
    stat_j = b * (K + 1) + j
    m_j = tl.load(m_ptr + stat_j, mask=b_ok, other=0.0)[:, None]
    s_j = tl.load(s_ptr + stat_j, mask=b_ok, other=1.0)[:, None]
    a_j = tl.load(a_ptr + stat_j, mask=b_ok, other=0)
    x_j = tl.sum(tl.where(k == j[:, None], x, 0), axis=1)
    x_j = tl.where(rejected, x_j, -1)[:, None]
    t_div = tl.where(greedy, 1.0, t)[:, None]
    j = j.to(tl.int64)
    c_row = (c_ptr + b * c_sb + j * c_si)[:, None]
    u_row = (u_ptr + b * u_sb + j * u_si)[:, None]
    q_row = (q_ptr + b * q_sb + j * q_si)[:, None]
    race = b_ok & ~greedy
    best_r = tl.zeros([BLOCK_B], tl.float32)
    best_p = tl.zeros([BLOCK_B], tl.float32)
    arg_r = tl.zeros([BLOCK_B], tl.int32)
    arg_p = tl.zeros([BLOCK_B], tl.int32)
    for v0 in range(0, V, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)[None, :]
        mask = race[:, None] & (cols < V)
        _, _, logit = _guided(c_row, u_row, cols, mask, g, HAS_UNCOND)
        p = tl.exp(logit / t_div - m_j) / s_j
        if HAS_Q:
            q = tl.load(q_row + cols, mask=mask & rejected[:, None], other=0.0)
            r = tl.maximum(p - q, 0.0)
        else:
            r = tl.where(cols == x_j, 0.0, p)  # one-hot q: the residual is p without the rejected draft
        cc = cols + 0 * b[:, None]
        bits, _, _, _ = tl.philox(seed, cc.to(tl.uint32), (b[:, None] + 0 * cols).to(tl.uint32), STREAM_RACE, 0)
        e = -tl.log(_uniform_open(bits))
        key_r = tl.where(mask, r / e, 0.0)
        key_p = tl.where(mask, p / e, 0.0)
        tile_r = tl.max(key_r, axis=1)
        tile_p = tl.max(key_p, axis=1)
        arg_r = tl.where(tile_r > best_r, tl.argmax(key_r, axis=1) + v0, arg_r)
        arg_p = tl.where(tile_p > best_p, tl.argmax(key_p, axis=1) + v0, arg_p)
        best_r = tl.maximum(best_r, tile_r)
        best_p = tl.maximum(best_p, tile_p)
    # a residual with no mass (q == p up to rounding) falls back to p, never to index 0
    drawn = tl.where(best_r > 0.0, arg_r, arg_p)
    emitted = tl.where(greedy, a_j, drawn).to(tl.int64)[:, None]
    # one store per element: accepted drafts, the emitted token at j, then -1
    tokens = tl.where(k < j[:, None], x, tl.where(k == j[:, None], emitted, -1))
    tl.store(tokens_ptr + b[:, None] * (K + 1) + k, tokens, mask=b_ok[:, None] & (k <= K))


def _blocks(V: int, rows: int) -> tuple[int, int]:
    block_v = min(triton.next_power_of_2(V), MAX_TILE)
    block_r = max(1, min(MAX_TILE // block_v, triton.next_power_of_2(rows)))
    return block_r, block_v


def rejection_sample_triton(
    target_logits: torch.Tensor,
    draft_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    temperature: torch.Tensor,
    uncond_logits: torch.Tensor | None,
    guidance_scale: torch.Tensor,
    num_draft: torch.Tensor,
    generator: torch.Generator | None,
) -> tuple[SampleOutput, torch.Tensor]:
    """Run both kernels. Arguments are validated by the entry point; temperature etc. are [B].

    Returns the output and int32 flags [B, K+1] of bad input values, which the caller must check.
    """
    B, K1, V = target_logits.shape
    K = K1 - 1
    device = target_logits.device
    c = target_logits if target_logits.stride(-1) == 1 else target_logits.contiguous()
    u = c if uncond_logits is None else (uncond_logits if uncond_logits.stride(-1) == 1 else uncond_logits.contiguous())
    q = c if draft_probs is None else (draft_probs if draft_probs.stride(-1) == 1 else draft_probs.contiguous())
    ids = draft_ids.contiguous()
    n = num_draft.to(torch.int32).contiguous()
    t = temperature.contiguous()
    g = guidance_scale.contiguous()
    seed = torch.randint(0, 2**62, (1,), generator=generator, device=device, dtype=torch.int64)
    has_u, has_q = uncond_logits is not None, draft_probs is not None

    stats = [torch.empty(B * K1, dtype=dt, device=device) for dt in (torch.float32,) * 2 + (torch.int32,)]
    px, qx, ov = (torch.empty(B * K1, dtype=torch.float32, device=device) for _ in range(3))
    flags = torch.empty(B * K1, dtype=torch.int32, device=device)
    strides = (c.stride(0), c.stride(1), u.stride(0), u.stride(1), q.stride(0), q.stride(1), ids.stride(0))

    block_r, block_v = _blocks(V, B * K1)
    # fmt: off
    _stats_kernel[(triton.cdiv(B * K1, block_r),)](
        c, u, q, ids, n, t, g, *stats, px, qx, ov, flags, B * K1, K, V, *strides,
        Q_TOL=Q_SUM_TOL, HAS_UNCOND=has_u, HAS_Q=has_q, BLOCK_R=block_r, BLOCK_V=block_v,
    )
    # fmt: on

    tokens = torch.empty((B, K1), dtype=torch.long, device=device)
    num_accepted = torch.empty(B, dtype=torch.long, device=device)
    accept_prob = torch.empty((B, K), dtype=torch.float32, device=device)
    residual_position = torch.empty(B, dtype=torch.long, device=device)
    block_b, block_v = _blocks(V, B)
    # fmt: off
    _accept_sample_kernel[(triton.cdiv(B, block_b),)](
        c, u, q, ids, n, t, g, seed, *stats, px, qx, tokens, num_accepted, accept_prob, residual_position,
        B, K, V, *strides,
        HAS_UNCOND=has_u, HAS_Q=has_q, BLOCK_B=block_b, BLOCK_K=triton.next_power_of_2(K1), BLOCK_V=block_v,
    )
    # fmt: on

    out = SampleOutput(
        tokens=tokens,
        num_accepted=num_accepted,
        accept_prob=accept_prob,
        overlap=ov.view(B, K1)[:, :K],
        residual_position=residual_position,
        backend="triton",
    )
    return out, flags.view(B, K1)
