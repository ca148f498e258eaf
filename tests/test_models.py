"""Loading models: the embedded pair, clear errors, vocabulary checks, the early-exit view."""

from __future__ import annotations

import pytest
import torch

from specviz.models import EMBEDDED_DRAFTER, EMBEDDED_TARGET, early_exit_view, load_models


def test_embedded_pair_loads_through_from_pretrained():
    models = load_models()
    assert models.target_name == str(EMBEDDED_TARGET) and models.drafter_name == str(EMBEDDED_DRAFTER)
    assert type(models.target).__name__ == "LlamaForCausalLM"
    assert models.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert models.drafter.num_parameters() * 3 < models.target.num_parameters()
    size = sum(f.stat().st_size for d in (EMBEDDED_TARGET, EMBEDDED_DRAFTER) for f in d.iterdir())
    assert size <= 25 * 2**20


def test_missing_folder():
    with pytest.raises(ValueError, match="target='/no/such/dir': no such model folder"):
        load_models(target="/no/such/dir")
    with pytest.raises(ValueError, match="drafter_model='./nope': no such model folder"):
        load_models(drafter_model="./nope")


def test_unreachable_hub_id():
    with pytest.raises(ValueError, match="specviz-test/does-not-exist"):
        load_models(target="specviz-test/does-not-exist")


def test_bad_choices():
    with pytest.raises(ValueError, match="drafter must be one of"):
        load_models(drafter="medusa")
    with pytest.raises(ValueError, match="dtype must be one of"):
        load_models(dtype="int8")


def _tiny_pair(tmp_path, vocab: int):
    """A tiny Llama with its own small byte-level tokenizer, saved like any Hugging Face model."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"], initial_alphabet=alphabet)
    tok.train_from_iterator(["def f(x):\n    return x + 1\n" * 20], trainer)
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    config = LlamaConfig(vocab_size=len(hf_tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, eos_token_id=0)  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    hf_tok.save_pretrained(tmp_path)
    return tmp_path


def test_vocabulary_mismatch_is_named(tmp_path):
    other = _tiny_pair(tmp_path, 300)
    with pytest.raises(
        ValueError, match=r"does not share the target's vocabulary: vocabulary size \d+ vs the target's"
    ):
        load_models(drafter_model=str(other))


def test_a_user_model_runs_end_to_end(tmp_path):
    from specviz import generate

    path = str(_tiny_pair(tmp_path, 300))
    trace = generate("def f(x):", target=path, drafter_model=path, k=3, max_new_tokens=8, seed=0)
    assert trace.config["target"] == path == trace.config["drafter_model"] and len(trace.output_ids) == 8


def test_early_exit_view_shares_weights_and_matches_a_truncated_forward():
    target = load_models(drafter=None).target
    view = early_exit_view(target, 2)
    assert view.model.embed_tokens.weight is target.model.embed_tokens.weight
    assert len(target.model.layers) == target.config.num_hidden_layers > 2 == len(view.model.layers)
    ids = torch.tensor([[5, 17, 99, 3]], device=target.device)
    with torch.no_grad():
        hidden = target(ids, output_hidden_states=True).hidden_states[2]
        expected = target.lm_head(target.model.norm(hidden))
        torch.testing.assert_close(view(ids).logits, expected)
