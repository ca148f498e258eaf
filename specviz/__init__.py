"""specviz: watch speculative decoding happen on real models."""

from .engine import generate
from .models import load_models
from .trace import StepRecord, Trace

__version__ = "0.1.0"
__all__ = ["StepRecord", "Trace", "generate", "load_models"]
