"""``hf:<model_type>``: Hugging Face models from a default configuration, no weights."""

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
