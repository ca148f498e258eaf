"""specviz.kernels: the exact rejection sampler of speculative decoding, fused in Triton.

`rejection_sample` is the entry point; `target_probs` and `residual_probs` rebuild the p and r the
sampler used, for showing a residual distribution.
"""

from .reference import residual_probs, target_probs
from .sampler import rejection_sample
from .types import SampleOutput

__all__ = ["SampleOutput", "rejection_sample", "residual_probs", "target_probs"]
