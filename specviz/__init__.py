"""specviz: watch speculative decoding happen on real models."""

__version__ = "0.1.0"
