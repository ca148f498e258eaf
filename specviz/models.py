"""Loading the target p and the drafter q: the embedded pair or any Hugging Face causal LM."""

from __future__ import annotations

import copy
import functools
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch

EMBEDDED = Path(__file__).parent / "assets" / "embedded"
EMBEDDED_TARGET = EMBEDDED / "target"
EMBEDDED_DRAFTER = EMBEDDED / "drafter"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Models:
    """The loaded pair. `drafter` is None unless the model drafter was asked for."""

    tokenizer: object
    target: torch.nn.Module
    drafter: torch.nn.Module | None
    target_name: str
    drafter_name: str | None
    device: torch.device
    dtype: torch.dtype

    @property
    def vocab_size(self) -> int:
        return vocab_size(self.target)

    @property
    def eos_ids(self) -> frozenset[int]:
        eos = self.target.generation_config.eos_token_id
        if eos is None:
            eos = self.target.config.eos_token_id
        if eos is None:
            return frozenset()
        return frozenset([eos] if isinstance(eos, int) else eos)

    @property
    def max_length(self) -> int | None:
        return getattr(self.target.config, "max_position_embeddings", None)


def vocab_size(model: torch.nn.Module) -> int:
    """Rows of the LM head: the V of this model's logits (may exceed the tokenizer's vocabulary)."""
    return model.get_output_embeddings().weight.shape[0]


def load_models(
    target: str | None = None,
    drafter: str | None = "model",
    drafter_model: str | None = None,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
) -> Models:
    """Load the target, its tokenizer and (for drafter="model") the drafter LM; drafter=None loads no drafter.

    target, drafter_model: Hugging Face ids or local folders; None is the embedded pair.
    device: default CUDA where present, else CPU. dtype: default bfloat16 on CUDA, float32 on CPU.
    Raises ValueError, before loading weights where it can, for a missing folder, an unreachable hub id,
    or a drafter whose vocabulary differs from the target's.
    """
    from .drafters import DRAFTERS

    if drafter is not None and drafter not in DRAFTERS:
        raise ValueError(f"drafter must be one of {', '.join(DRAFTERS)} or None, not {drafter!r}")
    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={str(device)!r}: CUDA is not available on this machine; use device='cpu'")
    dtype = _dtype(dtype, device)
    drafter_name = None
    if drafter == "model":
        drafter_name = str(drafter_model) if drafter_model is not None else str(EMBEDDED_DRAFTER)
    target_name = str(target) if target is not None else str(EMBEDDED_TARGET)
    return _load(target_name, drafter_name, str(device), dtype)


def _load(target_name: str, drafter_name: str | None, device: str, dtype: torch.dtype) -> Models:
    tokenizer, target = _load_one(target_name, "target", device, dtype)
    drafter = None
    if drafter_name is not None:
        drafter_tokenizer, drafter = _load_one(drafter_name, "drafter_model", device, dtype)
        _check_same_vocab(tokenizer, target, drafter_tokenizer, drafter_name)
        if vocab_size(drafter) != vocab_size(target):
            raise ValueError(
                f"drafter_model {drafter_name!r} has {vocab_size(drafter)} output logits, the target "
                f"{target_name!r} has {vocab_size(target)}: the drafter must share the target's vocabulary"
            )
    return Models(tokenizer, target, drafter, target_name, drafter_name, torch.device(device), dtype)


@functools.lru_cache(maxsize=4)
def _load_one(name: str, arg: str, device: str, dtype: torch.dtype):
    """Tokenizer and model, loaded once per (name, device, dtype): every drafter choice shares them."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = _from_pretrained(AutoTokenizer, name, arg)
    model = _from_pretrained(AutoModelForCausalLM, name, arg, dtype=dtype)
    return tokenizer, model.to(device).eval()


def _dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
        return DTYPES[dtype]
    if dtype not in DTYPES.values():
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype}")
    return dtype


def _check_source(name: str, arg: str) -> None:
    """A clear error for a missing folder or an unreachable hub, instead of transformers' retries."""
    path = Path(name).expanduser()
    if path.is_dir():
        return
    looks_like_path = name.startswith(("/", ".", "~")) or name.count("/") > 1 or (os.sep != "/" and os.sep in name)
    if looks_like_path or path.exists():
        raise ValueError(f"{arg}={name!r}: no such model folder")
    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return  # in the local hub cache
    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=3).close()
        reachable = not constants.HF_HUB_OFFLINE
    except OSError:
        reachable = False
    if not reachable:
        raise ValueError(
            f"{arg}={name!r} is not a local folder and not in the Hugging Face cache, and the hub ({host}) "
            "cannot be reached: download it where there is network, or pass a local folder"
        )


def _from_pretrained(cls, name: str, arg: str, **kwargs):
    _check_source(name, arg)
    try:
        return cls.from_pretrained(str(Path(name).expanduser()) if Path(name).expanduser().is_dir() else name, **kwargs)
    except (OSError, ValueError, KeyError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{arg}={name!r} could not be loaded: {first}") from e


def _check_same_vocab(tokenizer, target, drafter_tokenizer, drafter_name: str) -> None:
    """The drafter proposes ids the target must read the same way: same vocabulary, same special tokens."""
    differences = []
    if len(tokenizer) != len(drafter_tokenizer):
        differences.append(f"vocabulary size {len(drafter_tokenizer)} vs the target's {len(tokenizer)}")
    elif tokenizer.get_vocab() != drafter_tokenizer.get_vocab():
        differs = sum(1 for t, i in tokenizer.get_vocab().items() if drafter_tokenizer.get_vocab().get(t) != i)
        differences.append(f"{differs} tokens map to different ids")
    for special in ("eos_token_id", "bos_token_id"):
        a, b = getattr(tokenizer, special), getattr(drafter_tokenizer, special)
        if a != b:
            differences.append(f"{special} {b} vs the target's {a}")
    if differences:
        raise ValueError(
            f"drafter_model {drafter_name!r} does not share the target's vocabulary: " + "; ".join(differences)
        )


def early_exit_view(target: torch.nn.Module, exit_layer: int) -> torch.nn.Module:
    """The target's first `exit_layer` decoder layers with its own final norm and LM head, as a causal LM of
    its own (shared weights, its own KV cache). Works for Llama-like models (`model.model.layers`)."""
    inner = getattr(target, "model", None)
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList) or not hasattr(inner, "norm"):
        raise ValueError(
            f"the early-exit drafter needs a Llama-like decoder (model.layers, model.norm); "
            f"{type(target).__name__} has none"
        )
    n = len(layers)
    if not 1 <= exit_layer < n:
        raise ValueError(f"exit_layer must be in [1, {n - 1}] for this {n}-layer target, not {exit_layer}")
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = exit_layer
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:exit_layer]
    # Shallow copies with their own module tables: the parameters stay shared with the target.
    view_inner = copy.copy(inner)
    view_inner.__dict__["_modules"] = dict(inner._modules)
    view_inner.layers = torch.nn.ModuleList(list(layers[:exit_layer]))
    view_inner.config = config
    view = copy.copy(target)
    view.__dict__["_modules"] = dict(target._modules)
    view.model = view_inner
    view.config = config
    return view


def default_exit_layer(target: torch.nn.Module) -> int:
    """The exit layer the embedded target was trained for, else a third of the depth."""
    trained = getattr(target.config, "specviz_exit_layer", None)
    if trained is not None:
        return int(trained)
    return max(1, target.config.num_hidden_layers // 3)
