"""`specviz train`: the embedded model pair, reproduced from the Python standard library.

Corpus: the .py files of the running interpreter's stdlib (tests and demos left out), split by file into
train and held-out sets. Tokenizer: byte-level BPE. Target: a small LlamaForCausalLM trained with an
auxiliary loss at its exit layer through the shared final norm and LM head (LayerSkip-style), so the
early-exit drafter has real acceptance. Drafter: a much smaller Llama distilled from the target (forward
KL to the target's p), so its q is close to p where the target is confident.
"""

from __future__ import annotations

import hashlib
import json
import math
import sysconfig
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

EOS = "<|endoftext|>"
SKIP_DIRS = {"test", "tests", "idlelib", "lib2to3", "turtledemo", "site-packages", "__pycache__"}


@dataclass
class TrainConfig:
    out: str = str(Path(__file__).parent / "assets" / "embedded")
    vocab_size: int = 4096
    seq_len: int = 256
    batch_size: int = 16
    target_steps: int = 1500
    drafter_steps: int = 600
    lr: float = 3e-3
    warmup: int = 100
    exit_layer: int = 2
    exit_weight: float = 0.5
    heldout_every: int = 20  # one file in this many goes to the held-out set
    eval_batches: int = 20
    max_files: int | None = None  # a cap for quick runs (tests)
    seed: int = 0
    device: str | None = None
    target: dict = field(
        default_factory=lambda: dict(
            hidden_size=256, intermediate_size=688, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=4
        )
    )
    drafter: dict = field(
        default_factory=lambda: dict(
            hidden_size=128, intermediate_size=344, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
        )
    )


def stdlib_files(max_files: int | None = None) -> list[Path]:
    """The stdlib's .py files in sorted (deterministic) order, tests and demos left out."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in sorted(root.rglob("*.py")) if not SKIP_DIRS & set(p.relative_to(root).parts)]
    return files[:max_files] if max_files else files


def split_files(files: list[Path], every: int) -> tuple[list[Path], list[Path]]:
    """Held out: files whose path hash falls in one bucket of `every` (stable across runs and machines)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    held = [int(hashlib.sha1(str(f.relative_to(root)).encode()).hexdigest(), 16) % every == 0 for f in files]
    return [f for f, h in zip(files, held, strict=True) if not h], [f for f, h in zip(files, held, strict=True) if h]


def read(files: list[Path]) -> list[str]:
    return [f.read_text(encoding="utf-8", errors="replace") for f in files]


def train_tokenizer(texts: list[str], vocab_size: int):
    """Byte-level BPE over the training texts, wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, unk_token=None, pad_token=EOS)


def encode(tokenizer, texts: list[str]) -> torch.Tensor:
    """All texts as one stream of ids, each file followed by EOS."""
    ids: list[int] = []
    for t in texts:
        ids += tokenizer(t)["input_ids"] + [tokenizer.eos_token_id]
    return torch.tensor(ids, dtype=torch.long)


def llama(vocab_size: int, eos_id: int, seq_len: int, dims: dict, **extra):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        max_position_embeddings=4 * seq_len,
        tie_word_embeddings=True,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        **dims,
        **extra,
    )
    return LlamaForCausalLM(config)


def batches(stream: torch.Tensor, seq_len: int, batch_size: int, gen: torch.Generator):
    """Endless random windows [batch_size, seq_len + 1] from the token stream."""
    while True:
        starts = torch.randint(0, len(stream) - seq_len - 1, (batch_size,), generator=gen)
        yield torch.stack([stream[s : s + seq_len + 1] for s in starts.tolist()])


def exit_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """Logits at an early exit: the shared final norm and LM head on an intermediate hidden state."""
    return model.lm_head(model.model.norm(hidden))


def lr_at(step: int, steps: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * (step - cfg.warmup) / max(1, steps - cfg.warmup))) + cfg.lr * 0.02


def fit(model, steps: int, loss_fn, data, cfg: TrainConfig, label: str, log) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1)
    model.train()
    t0 = time.perf_counter()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, cfg)
        loss = loss_fn(next(data))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            log(f"{label} step {step + 1}/{steps} loss {loss.item():.3f} ({time.perf_counter() - t0:.0f} s)")
    model.eval()


@torch.no_grad()
def heldout_loss(model, stream: torch.Tensor, cfg: TrainConfig, layer: int | None = None) -> float:
    """Mean next-token cross-entropy (nats) on fixed held-out windows; `layer` evaluates an early exit."""
    gen = torch.Generator().manual_seed(1234)
    data = batches(stream, cfg.seq_len, cfg.batch_size, gen)
    total = 0.0
    for _ in range(cfg.eval_batches):
        x = next(data).to(model.device)
        out = model(x[:, :-1], output_hidden_states=layer is not None)
        logits = out.logits if layer is None else exit_logits(model, out.hidden_states[layer])
        total += F.cross_entropy(logits.flatten(0, 1).float(), x[:, 1:].flatten()).item()
    return total / cfg.eval_batches


def train(cfg: TrainConfig, log=print) -> dict:
    """Train tokenizer, target and drafter; save them under cfg.out/{target,drafter}; return the report."""
    if not 1 <= cfg.exit_layer < cfg.target["num_hidden_layers"]:
        raise ValueError(f"exit_layer must be in [1, {cfg.target['num_hidden_layers'] - 1}], not {cfg.exit_layer}")
    t_start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    device = torch.device(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    train_files, held_files = split_files(stdlib_files(cfg.max_files), cfg.heldout_every)
    if not held_files:  # tiny runs: hold out the last file
        train_files, held_files = train_files[:-1], train_files[-1:]
    train_texts = read(train_files)
    tokenizer = train_tokenizer(train_texts, cfg.vocab_size)
    train_ids, held_ids = encode(tokenizer, train_texts), encode(tokenizer, read(held_files))
    log(
        f"corpus: {len(train_files)} train files ({len(train_ids):,} tokens), {len(held_files)} held out "
        f"({len(held_ids):,} tokens); vocabulary {len(tokenizer)}"
    )
    V, eos = len(tokenizer), tokenizer.eos_token_id
    gen = torch.Generator().manual_seed(cfg.seed)

    target = llama(V, eos, cfg.seq_len, cfg.target, specviz_exit_layer=cfg.exit_layer).to(device)

    def target_loss(x: torch.Tensor) -> torch.Tensor:
        x = x.to(device)
        out = target(x[:, :-1], output_hidden_states=True)
        y = x[:, 1:].flatten()
        loss = F.cross_entropy(out.logits.flatten(0, 1).float(), y)
        early = exit_logits(target, out.hidden_states[cfg.exit_layer])
        return loss + cfg.exit_weight * F.cross_entropy(early.flatten(0, 1).float(), y)

    fit(target, cfg.target_steps, target_loss, batches(train_ids, cfg.seq_len, cfg.batch_size, gen), cfg, "target", log)

    drafter = llama(V, eos, cfg.seq_len, cfg.drafter).to(device)

    def distill_loss(x: torch.Tensor) -> torch.Tensor:
        x = x.to(device)[:, :-1]
        with torch.no_grad():
            log_p = F.log_softmax(target(x).logits.float(), -1)
        log_q = F.log_softmax(drafter(x).logits.float(), -1)
        return F.kl_div(log_q.flatten(0, 1), log_p.flatten(0, 1), log_target=True, reduction="batchmean")

    fit(
        drafter,
        cfg.drafter_steps,
        distill_loss,
        batches(train_ids, cfg.seq_len, cfg.batch_size, gen),
        cfg,
        "drafter",
        log,
    )

    out = Path(cfg.out)
    report = {
        "train_s": round(time.perf_counter() - t_start, 1),
        "device": str(device),
        "train_tokens": len(train_ids),
        "heldout_tokens": len(held_ids),
        "vocab_size": V,
    }
    for name, model in (("target", target), ("drafter", drafter)):
        model.to(torch.bfloat16)  # the shipped precision; evaluate what ships
        model.generation_config.eos_token_id = eos
        model.generation_config.pad_token_id = eos
        model.save_pretrained(out / name)
        tokenizer.save_pretrained(out / name)
        model.float()
        report[f"{name}_params"] = sum(p.numel() for p in model.parameters())
        report[f"{name}_heldout_loss"] = round(heldout_loss(model, held_ids, cfg), 4)
    report["exit_heldout_loss"] = round(heldout_loss(target, held_ids, cfg, layer=cfg.exit_layer), 4)
    report["config"] = {k: v for k, v in asdict(cfg).items() if k != "out"}
    (out / "train_report.json").write_text(json.dumps(report, indent=1) + "\n")
    log(
        f"done in {report['train_s']:.0f} s on {device}: held-out loss target {report['target_heldout_loss']:.3f}, "
        f"exit layer {cfg.exit_layer} {report['exit_heldout_loss']:.3f}, drafter {report['drafter_heldout_loss']:.3f} "
        "(nats/token)"
    )
    return report
