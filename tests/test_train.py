"""A tiny run of the same training that made the embedded pair."""

from __future__ import annotations

import json

from specviz import generate
from specviz.train import TrainConfig, split_files, stdlib_files, train


def test_split_is_deterministic_and_disjoint():
    files = stdlib_files()
    a, b = split_files(files, 20)
    assert (a, b) == split_files(list(files), 20)
    assert a and b and not set(a) & set(b) and len(a) + len(b) == len(files)


def test_tiny_training_run_saves_a_loadable_pair(tmp_path):
    small = dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1
    )
    cfg = TrainConfig(out=str(tmp_path), vocab_size=400, seq_len=32, batch_size=4, target_steps=4, drafter_steps=3,
                      warmup=2, exit_layer=1, eval_batches=1, max_files=6, target=small,
                      drafter=dict(small, num_hidden_layers=1))  # fmt: skip
    report = train(cfg, log=lambda line: None)
    saved = json.loads((tmp_path / "train_report.json").read_text())
    assert saved["target_heldout_loss"] == report["target_heldout_loss"] > 0
    assert report["drafter_params"] < report["target_params"]
    path = str(tmp_path / "target")
    trace = generate("def f(x):", target=path, drafter_model=str(tmp_path / "drafter"), k=2, max_new_tokens=6, seed=0)
    assert len(trace.output_ids) == 6
    early = generate("def f(x):", target=path, drafter="early-exit", k=2, max_new_tokens=6, seed=0)
    assert early.config["exit_layer"] == 1  # the layer it was trained to exit at, read from its config
