"""Exactness, measured: the emitted tokens follow the target distribution p whatever the drafter q.

Every test draws N independent verification steps in one batched call and runs Pearson's chi-square
against the exact distribution, with the 4-sigma limit of chi2(df) (tests/stats.py). Cells of
probability 0 must never be hit. test_power shows that N is large enough for the classic bugs to fail.
"""

from __future__ import annotations

import math

import pytest
import torch

from specviz.kernels import rejection_sample
from specviz.stats import assert_fits, chi2_threshold, noncentrality

N = 120_000
V = 8
# tokens 6 and 7 are impossible under the target (-inf logits); drafters still propose them
P0 = torch.tensor([0.30, 0.22, 0.18, 0.12, 0.10, 0.08, 0.0, 0.0])
P1 = torch.tensor([0.05, 0.10, 0.40, 0.05, 0.25, 0.0, 0.15, 0.0])
P2 = torch.tensor([0.14, 0.0, 0.16, 0.20, 0.0, 0.22, 0.08, 0.20])
UNIFORM = torch.full((V,), 1.0 / V)


def logits_of(*rows: torch.Tensor) -> torch.Tensor:
    return torch.stack([r.log() for r in rows])  # log 0 = -inf masks the token


def tempered(p: torch.Tensor, t: float) -> torch.Tensor:
    return torch.softmax(p.log() / t, -1)


def draw(
    backend: str,
    logits: torch.Tensor,
    q: torch.Tensor | None,
    *,
    seed: int,
    draft_ids: torch.Tensor | None = None,
    report_q: bool = True,
    n: int = N,
    **kwargs,
):
    """n rows of one step: target logits [K+1, V] and drafter q [K, V] shared by all rows,
    drafts sampled from q unless given."""
    g = torch.Generator().manual_seed(seed)
    K = logits.shape[0] - 1
    if draft_ids is None:
        draft_ids = torch.multinomial(q, n, replacement=True, generator=g).T.contiguous()
    draft_probs = q.expand(n, K, V) if (q is not None and report_q) else None
    out = rejection_sample(logits.expand(n, K + 1, V), draft_ids, draft_probs, generator=g, backend=backend, **kwargs)
    return draft_ids, out


def first_token_counts(out) -> torch.Tensor:
    return torch.bincount(out.tokens[:, 0], minlength=V)


def overlap(p: torch.Tensor, q: torch.Tensor) -> float:
    return float(torch.minimum(p, q).sum())


def check_diagnostics(out, draft_ids, ps, qs, num_draft=None):
    """accept_prob = min(1, p(x)/q(x)) and overlap = sum min(p, q) at each drafted position."""
    K = draft_ids.shape[1]
    n = torch.full((draft_ids.shape[0],), K) if num_draft is None else num_draft
    for i in range(K):
        rows = n > i
        x = draft_ids[rows, i]
        ratio = torch.where(qs[i][x] > 0, ps[i][x] / qs[i][x], (ps[i][x] > 0).float()).clamp(max=1)
        torch.testing.assert_close(out.accept_prob[rows, i], ratio, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            out.overlap[rows, i],
            torch.full_like(x, overlap(ps[i], qs[i]), dtype=torch.float32),
            atol=1e-5,
            rtol=1e-5,
        )
        assert out.accept_prob[~rows, i].isnan().all() and out.overlap[~rows, i].isnan().all()


def test_uniform_drafter(backend):
    """A clueless drafter: acceptance is low, the output is still exactly p, at every position."""
    qs = torch.stack([UNIFORM, UNIFORM, UNIFORM])
    ids, out = draw(backend, logits_of(P0, P1, P2, P0), qs, seed=1)
    assert_fits(first_token_counts(out), P0, "first token")
    check_diagnostics(out, ids, [P0, P1, P2], qs)
    # drafts with p = 0 (tokens 6, 7 at position 0) are never accepted
    assert not ((out.num_accepted >= 1) & (ids[:, 0] >= 6)).any()
    # positions are independent here, so E[accepted] = b0 (1 + b1 (1 + b2)) with b_i = sum min(p_i, q_i)
    b = [overlap(p, UNIFORM) for p in (P0, P1, P2)]
    acc = out.num_accepted.double()
    tol = 4 * acc.std().item() / math.sqrt(N)
    assert acc.mean().item() == pytest.approx(b[0] * (1 + b[1] * (1 + b[2])), abs=tol)


def test_disjoint_drafter(backend):
    """q only on tokens with p = 0: nothing is ever accepted, and the residual is exactly p."""
    q = torch.tensor([0, 0, 0, 0, 0, 0, 0.5, 0.5])
    qs = torch.stack([q, q])
    ids, out = draw(backend, logits_of(P0, P1, P2), qs, seed=2)
    assert (out.num_accepted == 0).all()
    assert (out.residual_position == 0).all()
    assert (out.overlap[:, 0] == 0).all()
    assert_fits(first_token_counts(out), P0, "first token")


def test_q_equals_p(backend):
    """q = p: every draft is accepted and the bonus token is drawn from p_K."""
    K = 3
    ps = [P0, P1, P2, P1]
    qs = torch.stack([torch.softmax(p.log(), -1) for p in ps[:K]])
    ids, out = draw(backend, logits_of(*ps), qs, seed=3)
    # u * q(x) <= p(x) can fail only where q(x) exceeds p(x) by rounding and u is within an ulp of 1
    assert (out.num_accepted == K).float().mean().item() > 1 - 1e-4
    full = out.num_accepted == K
    assert (out.residual_position[full] == -1).all()
    assert_fits(torch.bincount(out.tokens[full, K], minlength=V), P1, "bonus token")
    assert_fits(first_token_counts(out), P0, "first token")
    torch.testing.assert_close(out.overlap, torch.ones(N, K), atol=1e-5, rtol=0)


@pytest.mark.parametrize("t", [0.6, 1.7])
def test_temperature(backend, t):
    """p = softmax(logits / t): the drafter samples at its own q, the output lands on tempered p."""
    q = torch.tensor([0.05, 0.05, 0.3, 0.3, 0.1, 0.1, 0.05, 0.05])
    qs = torch.stack([q, q])
    ids, out = draw(backend, logits_of(P0, P1, P2), qs, seed=4, temperature=t)
    pt = [tempered(P0, t), tempered(P1, t)]
    assert_fits(first_token_counts(out), pt[0], f"first token at t={t}")
    check_diagnostics(out, ids, pt, qs)


def test_guidance(backend):
    """Guided p = softmax((u + g*(c - u)) / t), with -inf in either branch kept masked."""
    g_scale, t = 2.5, 0.8
    c = logits_of(P0, P1, P2)
    uncond_p = torch.tensor([0.10, 0.30, 0.05, 0.25, 0.20, 0.10, 0.0, 0.0])
    u = logits_of(uncond_p, P2, P1)
    masked = (c == -math.inf) | (u == -math.inf)
    guided = torch.softmax(torch.where(masked, -math.inf, u + g_scale * (c - u)) / t, -1)
    qs = torch.stack([UNIFORM, UNIFORM])
    n = N
    ids, out = draw(backend, c, qs, seed=5, temperature=t, guidance_scale=g_scale, uncond_logits=u.expand(n, 3, V), n=n)
    assert_fits(first_token_counts(out), guided[0], "first token, guided")
    check_diagnostics(out, ids, guided, qs)


def test_deterministic_drafter(backend):
    """draft_probs=None: q is one-hot at the draft, acceptance is u <= p(x), the residual is p without x."""
    ids = (torch.arange(N) % V)[:, None].repeat(1, 2)  # every token drafted, p = 0 ones included
    ids, out = draw(backend, logits_of(P0, P1, P2), None, seed=6, draft_ids=ids)
    assert_fits(first_token_counts(out), P0, "first token")
    torch.testing.assert_close(out.accept_prob[:, 0], P0[ids[:, 0]], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.overlap[:, 0], P0[ids[:, 0]], atol=1e-5, rtol=1e-5)
    # per drafted token: accepted at rate p(x), otherwise the residual p(. | not x)
    for x in range(V):
        rows = ids[:, 0] == x
        counts = torch.bincount(out.tokens[rows, 0], minlength=V)
        assert_fits(counts, P0, f"first token given draft {x}")


def test_ragged_num_draft(backend):
    """Rows propose 0..K drafts, padded with -1: padding is never read and every row still emits p."""
    K = 3
    qs = torch.stack([UNIFORM] * K)
    g = torch.Generator().manual_seed(7)
    n_draft = torch.arange(N) % (K + 1)
    ids = torch.multinomial(qs, N, replacement=True, generator=g).T.contiguous()
    ids[torch.arange(K)[None, :] >= n_draft[:, None]] = -1
    ids, out = draw(backend, logits_of(P0, P1, P2, P1), qs, seed=7, draft_ids=ids, num_draft=n_draft)
    assert (out.num_accepted <= n_draft).all()
    assert_fits(first_token_counts(out), P0, "first token, ragged")
    zero = n_draft == 0
    assert (out.residual_position[zero] == -1).all() and out.accept_prob[zero].isnan().all()
    assert_fits(torch.bincount(out.tokens[zero, 0], minlength=V), P0, "bonus token of rows with no drafts")
    check_diagnostics(out, ids, [P0, P1, P2], qs, num_draft=n_draft)
    emitted = out.tokens.gather(1, out.num_accepted[:, None])[:, 0]
    assert ((emitted >= 0) & (emitted < V)).all()


def _two_token_world(V2: int = 5):
    """p(t0) p(t1 | t0) and a drafter q that differs, both with zero cells (no token repeats under p)."""
    g = torch.Generator().manual_seed(11)
    p0 = torch.tensor([0.35, 0.25, 0.2, 0.15, 0.05])
    p1 = torch.rand((V2, V2), generator=g) + 0.2
    p1.fill_diagonal_(0)
    p1 /= p1.sum(-1, keepdim=True)
    q0 = torch.tensor([0.1, 0.1, 0.2, 0.3, 0.3])
    q1 = torch.rand((V2, V2), generator=g) + 0.05
    q1 /= q1.sum(-1, keepdim=True)
    return p0, p1, q0, q1


def test_joint_first_two_tokens(backend):
    """The pair (t0, t1) follows p(t0) p(t1 | t0): acceptance at position 1 is conditioned on position 0.

    Where position 0 was rejected, t1 comes from a second step on the context t0, as in generation.
    """
    p0, p1, q0, q1 = _two_token_world()
    V2 = p0.shape[0]
    n = 200_000
    g = torch.Generator().manual_seed(12)
    flat = torch.full((V2,), 1.0 / V2)
    x0 = torch.multinomial(q0, n, replacement=True, generator=g)
    x1 = torch.multinomial(q1[x0], 1, generator=g)[:, 0]
    target = torch.stack([p0.log().expand(n, V2), p1[x0].log(), flat.log().expand(n, V2)], 1)
    q = torch.stack([q0.expand(n, V2), q1[x0]], 1)
    out = rejection_sample(target, torch.stack([x0, x1], 1), q, generator=g, backend=backend)
    t0, t1 = out.tokens[:, 0], out.tokens[:, 1].clone()

    again = out.num_accepted == 0
    m = int(again.sum())
    c0 = t0[again]
    y1 = torch.multinomial(q1[c0], 1, generator=g)[:, 0]
    y2 = torch.multinomial(flat, m, replacement=True, generator=g)
    target2 = torch.stack([p1[c0].log(), flat.log().expand(m, V2), flat.log().expand(m, V2)], 1)
    q2 = torch.stack([q1[c0], flat.expand(m, V2)], 1)
    out2 = rejection_sample(target2, torch.stack([y1, y2], 1), q2, generator=g, backend=backend)
    t1[again] = out2.tokens[:, 0]

    counts = torch.bincount(t0 * V2 + t1, minlength=V2 * V2)
    assert_fits(counts, p0[:, None] * p1, "joint (t0, t1)")


def test_multi_tile_vocabulary(backend):
    """V = 100,003 spans several tiles (two even in the interpreter): the online softmax merges exactly."""
    n, Vb = 250, 100_003
    support = torch.tensor([3, 65_535, 65_536, 100_002])
    c = torch.full((2, Vb), -40.0)  # e^-40 * 1e5 ~ 4e-13 of mass off the support
    c[0, support] = torch.tensor([0.0, 1.0, -0.5, 0.7])
    c[1, support] = torch.tensor([0.2, -1.0, 0.3, 0.0])
    q = torch.full((1, Vb), 1e-9)
    q[0, support] = torch.tensor([0.5, 0.1, 0.2, 0.2])
    q /= q.sum()
    g = torch.Generator().manual_seed(13)
    ids = torch.multinomial(q, n, replacement=True, generator=g).T.contiguous()
    out = rejection_sample(c.expand(n, 2, Vb), ids, q.expand(n, 1, Vb), generator=g, backend=backend)
    p = torch.softmax(c[0].double(), -1)
    t0 = out.tokens[:, 0]
    counts = torch.stack([(t0 == s).sum() for s in support] + [(~torch.isin(t0, support)).sum()])
    probs = torch.cat([p[support], (1 - p[support].sum()).clamp_min(0)[None]])
    probs[-1] = 0.0  # ~4e-13: a hit here at n = 250 would be a bug
    assert_fits(counts, probs / probs.sum(), "first token, V = 100003")
    expected_overlap = torch.minimum(p, q[0].double()).sum().item()
    torch.testing.assert_close(out.overlap[:, 0], torch.full((n,), expected_overlap, dtype=torch.float32))


def test_power():
    """N is large enough: each classic bug moves the chi-square statistic far past the 4-sigma limit."""
    q = UNIFORM
    beta = overlap(P0, q)
    # sampling from p instead of the residual at a rejection (the residual forgotten, or a missing
    # clamp whose zero mass falls back to p)
    wrong_residual = torch.minimum(P0, q) + (1 - beta) * P0
    # p not renormalized after the online max subtraction: exp(z - max) read as probabilities
    p_raw = P0 / P0.max()
    r = (p_raw - q).clamp_min(0)
    unnormalized = torch.minimum(p_raw, q) + (1 - torch.minimum(p_raw, q).sum()) * r / r.sum()
    # the residual's clamp on the wrong side: max(q - p, 0)
    flipped = torch.minimum(P0, q) + (1 - beta) * (q - P0).clamp_min(0) / (q - P0).clamp_min(0).sum()
    limit = chi2_threshold(int((P0 > 0).sum()) - 1)
    for name, wrong in [("wrong residual", wrong_residual), ("unnormalized p", unnormalized)]:
        lam = noncentrality(N, P0, wrong)
        assert lam > 10 * limit, f"{name}: noncentrality {lam:.0f} is too close to the limit {limit:.0f}"
    # accepting a p = 0 token: any hit of a zero cell fails at once
    assert noncentrality(N, P0, flipped) == math.inf
