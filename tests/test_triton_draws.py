"""The Triton kernels' bit-to-float maps at the extreme bit patterns."""

import pytest
import torch
import triton
import triton.language as tl

from specviz.kernels.triton_sampler import _uniform_left_open, _uniform_open


@triton.jit
def _probe(bits_ptr, open_ptr, left_ptr, N: tl.constexpr):
    bits = tl.load(bits_ptr + tl.arange(0, N)).to(tl.uint32, bitcast=True)
    tl.store(open_ptr + tl.arange(0, N), _uniform_open(bits))
    tl.store(left_ptr + tl.arange(0, N), _uniform_left_open(bits))


def test_uniform_draws_avoid_their_endpoints():
    """Acceptance u lies in (0, 1], so u = 0 never accepts p = 0; race draws lie in (0, 1), so -log u
    is a finite, positive Exp(1) draw."""
    patterns = [0, 255, 256, 2**31, 2**32 - 256, 2**32 - 1, 1, 2**24]
    bits = torch.tensor([b - 2**32 if b >= 2**31 else b for b in patterns], dtype=torch.int32)
    u_open, u_left = torch.empty(8), torch.empty(8)
    _probe[(1,)](bits, u_open, u_left, N=8)
    assert ((u_open > 0) & (u_open < 1)).all() and torch.isfinite(-u_open.log()).all()
    assert ((u_left > 0) & (u_left <= 1)).all()
    assert u_left[0] == 1.0 and u_left[5] == pytest.approx(2**-24)
    assert u_open[0] == 2**-24 and u_open[5] == 1 - 2**-24
