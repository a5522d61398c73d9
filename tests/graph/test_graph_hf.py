"""``hf:<model_type>``: Hugging Face models from a default configuration, no weights: encoders,
decoder language models, encoder-decoders, speech and two-tower models, each with its inputs."""

from __future__ import annotations

import sys

import pytest

from qosched.core.errors import InputError
from qosched.graph.capture import capture_spec, load_model
from qosched.graph.hf import hf_model


def test_bert_base_matmul_flops_match_the_hand_formula():
    graph = capture_spec("hf:bert")  # BertConfig() is BERT-base: 12 layers, hidden 768
    seq, hidden, ffn, layers = 128, 768, 3072, 12
    # Per layer: Q, K, V, output projections and the two feed-forward linears, then the two
    # attention matmuls; the pooler is one 768x768 linear on the first token.
    linears = layers * 2 * seq * (4 * hidden * hidden + 2 * hidden * ffn) + 2 * hidden * hidden
    attention = layers * 2 * (2 * seq * seq * hidden)
    flops = {}
    for op in graph.operators:
        flops[op.target] = flops.get(op.target, 0) + op.flops
    assert flops["aten.addmm.default"] == linears
    assert flops["aten.bmm.default"] == attention


def test_a_vision_model_gets_images_of_its_configured_size():
    model, (pixels,) = hf_model("hf:vit", batch=2)
    assert pixels.shape == (2, 3, 224, 224) and pixels.device.type == "meta"
    assert type(model).__name__ == "ViTModel"


def test_an_unknown_model_type_is_named():
    with pytest.raises(InputError, match="no model type 'no-such-model'"):
        load_model("hf:no-such-model")


def test_without_transformers_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes the import fail
    with pytest.raises(InputError, match=r"qosched\[transformers\]"):
        load_model("hf:bert")


def _flops_by_target(spec: str) -> dict[str, int]:
    flops: dict[str, int] = {}
    for op in capture_spec(spec).operators:
        flops[op.target] = flops.get(op.target, 0) + op.flops
    return flops


def test_a_decoder_language_model_is_captured_as_one_pass_over_the_prompt():
    # GPT2Config(): 12 layers, width 768, MLP 3072; its key-value cache is not returned.
    flops = _flops_by_target("hf:gpt2")
    seq, width, layers = 128, 768, 12
    per_layer = 3 * width * width + width * width + 2 * width * 4 * width  # qkv, out, MLP
    assert flops["aten.addmm.default"] == layers * 2 * seq * per_layer
    assert flops["aten.bmm.default"] == layers * 2 * (2 * seq * seq * width)  # QK^T and AV


def test_an_encoder_decoder_gets_decoder_inputs_and_runs_both_stacks():
    # T5Config(): 6 encoder and 6 decoder layers, width 512, feed-forward 2048, no biases; the
    # decoder reads 128 tokens (teacher-forced) and cross-attends to the encoder's 128.
    flops = _flops_by_target("hf:t5")
    seq, width, ffn, layers = 128, 512, 2048, 6
    feed_forward = 2 * 2 * seq * width * ffn
    encoder = layers * (4 * 2 * seq * width * width + feed_forward)
    decoder = layers * (8 * 2 * seq * width * width + feed_forward)  # self- and cross-attention
    assert flops["aten.mm.default"] == encoder + decoder
    # Scores and weighted sums: encoder self, decoder self and decoder cross-attention.
    assert flops["aten.bmm.default"] == 3 * layers * 2 * (2 * seq * seq * width)


@pytest.mark.parametrize(
    ("model_type", "shapes"),
    [
        ("whisper", [(2, 80, 3000), (2, 128)]),  # log-mel frames of 30 s, decoder tokens
        ("wav2vec2", [(2, 16000)]),  # one second of samples
        ("speech_to_text", [(2, 3000, 80), (2, 128)]),  # 30 s of filterbank frames, frames first
        ("clip", [(2, 77), (2, 3, 224, 224)]),  # tokens up to its 77 positions, and images
        ("llama", [(2, 128)]),
        ("xlnet", [(2, 128)]),  # relative positions: its limit of -1 is no limit
    ],
)
def test_speech_and_two_tower_models_get_inputs_of_each_kind(model_type, shapes):
    model, inputs = hf_model(f"hf:{model_type}", batch=2)
    assert [tuple(t.shape) for t in inputs] == shapes
    if len(shapes) > 1:  # passed by position, read by name
        assert len(model.input_names) == len(shapes)
    assert getattr(model.config, "use_cache", False) is False  # no key-value cache to return


def test_a_model_needing_a_missing_library_is_named(monkeypatch):
    import transformers

    def needs_timm(config):
        raise ImportError("\nTimmBackbone requires the timm library but it was not found.\n")

    monkeypatch.setattr(transformers.AutoModel, "from_config", needs_timm)
    with pytest.raises(InputError, match="needs another library for it: TimmBackbone requires"):
        hf_model("hf:bert")


def test_a_default_configuration_that_builds_no_model_is_an_input_error(monkeypatch):
    import transformers

    def no_vocabulary(config):  # what ESM's default configuration (vocab_size=None) raises
        raise TypeError("empty(): argument 'size' (position 1) must be tuple of ints")

    monkeypatch.setattr(transformers.AutoModel, "from_config", no_vocabulary)
    with pytest.raises(InputError, match="cannot build it from its default configuration"):
        hf_model("hf:bert")


def test_a_multimodal_model_builds_its_language_model_without_a_cache():
    # LLaVA's language model reads use_cache from its text configuration; with the cache on, it
    # returns a DynamicCache, which torch.export cannot return.
    model, inputs = hf_model("hf:llava")
    assert model.config.text_config.use_cache is False
    assert [tuple(t.shape) for t in inputs] == [(1, 128), (1, 3, 336, 336)]
