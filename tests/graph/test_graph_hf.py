"""``hf:<model_type>``: Hugging Face models from a default configuration, no weights: encoders,
decoder language models, encoder-decoders, speech and two-tower models, each with its inputs."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
import torch

from qosched.core.errors import InputError
from qosched.graph.capture import capture_spec, load_model
from qosched.graph.hf import hf_model


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_decoder_language_model_is_captured_as_one_pass_over_the_prompt():
    # GPT2Config(): 12 layers, width 768, MLP 3072; its key-value cache is not returned.
    flops = _flops_by_target("hf:gpt2")
    seq, width, layers = 128, 768, 12
    per_layer = 3 * width * width + width * width + 2 * width * 4 * width  # qkv, out, MLP
    assert flops["aten.addmm.default"] == layers * 2 * seq * per_layer
    assert flops["aten.bmm.default"] == layers * 2 * (2 * seq * seq * width)  # QK^T and AV


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model_type", "shapes"),
    [
        ("whisper", [(2, 80, 3000), (2, 128)]),  # log-mel frames of 30 s, decoder tokens
        ("wav2vec2", [(2, 16000)]),  # one second of samples
        ("speech_to_text", [(2, 3000, 80), (2, 128)]),  # 30 s of filterbank frames, frames first
        # Tokens up to its 77 positions, their attention mask, and images.
        ("clip", [(2, 77), (2, 77), (2, 3, 224, 224)]),
        ("llama", [(2, 128), (2, 128)]),
        ("xlnet", [(2, 128), (2, 128)]),  # relative positions: its limit of -1 is no limit
        ("clap", [(2, 128), (2, 128), (2, 1, 1001, 64)]),  # 10 s at 48 kHz in 480-sample hops
        ("encodec", [(2, 1, 24000)]),  # one second at its 24 kHz, one channel
        ("videomae", [(2, 16, 3, 224, 224)]),  # a clip of its 16 frames
        ("timesformer", [(2, 8, 3, 224, 224)]),  # a clip of its 8 frames
    ],
)
def test_speech_and_two_tower_models_get_inputs_of_each_kind(model_type, shapes):
    model, inputs = hf_model(f"hf:{model_type}", batch=2)
    assert [tuple(t.shape) for t in inputs] == shapes
    if len(shapes) > 1:  # passed by position, read by name
        assert len(model.input_names) == len(shapes)
    assert getattr(model.config, "use_cache", False) is False  # no key-value cache to return


@pytest.mark.slow
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
    # Its 336 x 336 images in 14 x 14 patches give 24 x 24 = 576 image tokens before the text.
    assert [tuple(t.shape) for t in inputs] == [(1, 576 + 128), (1, 576 + 128), (1, 3, 336, 336)]


@pytest.fixture
def configured(monkeypatch):
    """Build ``hf:<model_type>`` from its default configuration with some fields set, as a
    checkpoint's configuration would: a small model captures in a second or two."""
    import transformers

    for_model = transformers.AutoConfig.for_model

    def use(**fields: Any) -> None:
        def with_fields(model_type: str, **kwargs: Any) -> Any:
            return for_model(model_type, **fields, **kwargs)

        monkeypatch.setattr(transformers.AutoConfig, "for_model", with_fields)

    return use


def _layers(**fields: Any) -> dict[str, Any]:
    """One small transformer layer: width 32, two heads, feed-forward 64."""
    small = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    return small | fields


def _summed(graph: Any, *targets: str) -> int:
    return sum(op.flops for op in graph.operators if op.target in targets)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model_type", "fields", "frames_per_token"),
    [
        ("videomae", {"tubelet_size": 2}, 2),  # a token is a tube of 2 frames
        ("timesformer", {}, 1),  # a token is a patch of one frame
    ],
    ids=["videomae", "timesformer"],
)
def test_a_video_model_reads_a_clip_of_its_configured_frames(
    configured, model_type, fields, frames_per_token
):
    frames, channels, size, patch = 4, 3, 32, 16
    configured(**_layers(image_size=size, patch_size=patch, num_frames=frames, **fields))
    graph = capture_spec(f"hf:{model_type}")
    assert [v.meta.shape for v in graph.inputs] == [(1, frames, channels, size, size)]
    # The patch embedding sees every pixel of every frame once: 2 FLOPs per pixel, channel and
    # output feature.
    tokens = (frames // frames_per_token) * (size // patch) ** 2
    pixels_per_token = frames_per_token * channels * patch * patch
    assert _summed(graph, "aten.convolution.default") == 2 * tokens * 32 * pixels_per_token


@pytest.mark.slow
def test_videomae_matmul_flops_match_the_hand_formula(configured):
    configured(**_layers(image_size=32, patch_size=16, num_frames=4, tubelet_size=2))
    graph = capture_spec("hf:videomae")
    tokens, width, ffn = 2 * 2 * 2, 32, 64  # 2 tubes in time, 2 x 2 patches in space
    linears = 2 * tokens * (4 * width * width + 2 * width * ffn)  # Q, K, V, out; feed-forward
    assert _summed(graph, "aten.mm.default", "aten.addmm.default") == linears
    assert _summed(graph, "aten.bmm.default") == 2 * (2 * tokens * tokens * width)


@pytest.mark.slow
def test_siglip2_reads_images_as_patches_with_their_grid(configured):
    configured(
        text_config=_layers(max_position_embeddings=16, vocab_size=100, projection_size=32),
        vision_config=_layers(num_patches=16, patch_size=4),
    )
    model, inputs = hf_model("hf:siglip2", device="cpu")
    assert model.input_names == (
        "input_ids",
        "attention_mask",
        "pixel_values",
        "pixel_attention_mask",
        "spatial_shapes",
    )
    # 16 patches of 3 x 4 x 4 values each, all real (mask of ones), in a 4 x 4 grid.
    assert [tuple(t.shape) for t in inputs] == [(1, 16), (1, 16), (1, 16, 48), (1, 16), (1, 2)]
    assert inputs[3].eq(1).all() and inputs[4].tolist() == [[4, 4]]
    graph = capture_spec("hf:siglip2")
    patch_embedding = [op for op in graph.operators if op.module.endswith("patch_embedding")]
    assert sum(op.flops for op in patch_embedding) == 2 * 16 * 48 * 32


@pytest.mark.slow
def test_clap_reads_text_and_a_spectrogram_no_longer_than_its_encoder_takes(configured):
    # Its encoder folds the spectrogram into a spec_size square: 64 x 64 from 256 frames of
    # 16 mel bins (4 frame rows per square row), so 1,001 frames would not fit.
    audio = dict(spec_size=64, num_mel_bins=16, patch_size=4, patch_stride=[4, 4])
    audio |= dict(window_size=4, depths=[1, 1], num_attention_heads=[1, 2])
    audio |= dict(patch_embeds_hidden_size=8, hidden_size=16, projection_hidden_size=16)
    configured(
        projection_dim=16,
        text_config=_layers(max_position_embeddings=40, vocab_size=100),
        audio_config=audio,
    )
    graph = capture_spec("hf:clap")
    assert [v.meta.shape for v in graph.inputs] == [(1, 40), (1, 40), (1, 1, 256, 16)]
    patches = (64 // 4) ** 2  # 4 x 4 patches of the 64 x 64 square, 8 features each
    assert _summed(graph, "aten.convolution.default") == 2 * patches * 8 * 4 * 4


@pytest.mark.slow
def test_encodec_reads_its_channels_at_its_sampling_rate(configured):
    configured(audio_channels=2, sampling_rate=8000)
    _, (samples,) = hf_model("hf:encodec")
    assert samples.shape == (1, 2, 8000)  # one second, (batch, channels, samples)


#: EnCodec, small: 64 samples a second, one downsampling by 2, 4 filters, a latent of 8, one
#: residual block and LSTM layer a side, codebooks of 16 codes, 0.5 kbps.
_ENCODEC = dict(sampling_rate=64, upsampling_ratios=[2], num_filters=4, hidden_size=8)
_ENCODEC |= dict(num_residual_layers=1, num_lstm_layers=1, codebook_size=16)
_ENCODEC |= dict(target_bandwidths=[0.5])


def _conv(length: int, out_channels: int, in_channels: int, kernel: int) -> int:
    """FLOPs of a 1-D convolution over ``length`` positions (of its input, if transposed)."""
    return 2 * length * out_channels * in_channels * kernel


@pytest.mark.slow
def test_encodec_flops_match_the_hand_formula(configured):
    # One second of 64 samples, one downsampling by 2 (32 frames), 4 filters doubled to 8, a
    # latent of 8, one residual block and one LSTM layer a side, codebooks of 16 codes. Its
    # convolutions keep their geometry in buffers, which the capture reads as integers.
    configured(**_ENCODEC)
    graph = capture_spec("hf:encodec")
    assert [v.meta.shape for v in graph.inputs] == [(1, 1, 64)]
    samples, frames = 64, 32
    # A residual block of 4 channels: kernel 3 down to 2 (compress 2), kernel 1 back up to 4,
    # and a 1 x 1 shortcut. Causal padding keeps each stride-1 convolution's length.
    block = _conv(samples, 2, 4, 3) + _conv(samples, 4, 2, 1) + _conv(samples, 4, 4, 1)
    encoder = _conv(samples, 4, 1, 7) + block + _conv(frames, 8, 4, 4) + _conv(frames, 8, 8, 7)
    # The transposed upsampling (kernel 4, stride 2) counts over its 32 input frames.
    decoder = _conv(frames, 8, 8, 7) + _conv(frames, 4, 8, 4) + block + _conv(samples, 1, 4, 7)
    assert _summed(graph, "aten.convolution.default") == encoder + decoder
    # An LSTM of 8 a side: 4 gates of 8 from the input and from the last state, every frame.
    assert _summed(graph, "aten.addmm.default", "aten.bmm.default") == 2 * 2 * (
        2 * frames * 8 * 4 * 8
    )
    # At its bandwidth, 0.5 kbps, in codes of 4 bits at 32 frames a second: 3 codebooks, each
    # comparing every frame's 8 values with its 16 codes.
    quantizers = 500 // (4 * frames)
    assert _summed(graph, "aten.mm.default") == quantizers * 2 * frames * 8 * 16


def test_token_ids_come_with_an_attention_mask_of_ones(configured):
    configured(**_layers(vocab_size=100, max_position_embeddings=16))
    model, (ids, mask) = hf_model("hf:bert", device="cpu")
    assert model.input_names == ("input_ids", "attention_mask")
    assert mask.shape == ids.shape == (1, 16) and mask.eq(1).all()


@pytest.mark.slow
def test_longt5_captures_with_its_attention_mask(configured):
    # LongT5 cuts its attention mask into local blocks, and has none to cut without one.
    configured(d_model=32, d_kv=16, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=2)
    graph = capture_spec("hf:longt5")
    assert [v.meta.shape for v in graph.inputs] == [(1, 128)] * 3
    # The projections as for T5: 4 in encoder self-attention, 8 in the decoder's self- and
    # cross-attention, and a feed-forward in each; no biases.
    seq, width, ffn = 128, 32, 64
    feed_forward = 2 * 2 * seq * width * ffn
    assert _summed(graph, "aten.mm.default") == 12 * 2 * seq * width * width + 2 * feed_forward


def _blip2(**fields: Any) -> dict[str, Any]:
    vision = _layers(image_size=32, patch_size=16)
    qformer = _layers(encoder_hidden_size=32, vocab_size=100)
    text = dict(model_type="opt", hidden_size=32, num_hidden_layers=1, num_attention_heads=2)
    text |= dict(ffn_dim=64, vocab_size=100, max_position_embeddings=64, word_embed_proj_dim=32)
    return (
        dict(num_query_tokens=4, vision_config=vision, qformer_config=qformer, text_config=text)
        | fields
    )


@pytest.mark.slow
def test_blip2_reads_images_and_the_text_they_go_into(configured):
    configured(**_blip2(image_token_index=99))
    graph = capture_spec("hf:blip-2")
    assert [v.meta.shape for v in graph.inputs] == [(1, 3, 32, 32), (1, 64), (1, 64)]
    assert _summed(graph, "aten.convolution.default") == 2 * 4 * 32 * 3 * 16 * 16


def _summed_in(graph: Any, module: str, *targets: str) -> int:
    """FLOPs of ``targets`` in the top-level module ``module`` of the model."""
    return sum(
        op.flops
        for op in graph.operators
        if op.target in targets and op.module.split(".")[0] == module
    )


def _llava(**fields: Any) -> dict[str, Any]:
    """A CLIP vision tower on 32 x 32 images in 16 x 16 patches (4 patches and a class token) and
    a one-layer Llama of width 32 reading at most 64 tokens."""
    vision = _layers(model_type="clip_vision_model", image_size=32, patch_size=16)
    text = _layers(model_type="llama", num_key_value_heads=2, vocab_size=120)
    text |= dict(max_position_embeddings=64)
    return dict(vision_config=vision, text_config=text, image_token_id=110) | fields


@pytest.mark.slow
def test_llava_text_holds_one_image_token_per_image_feature(configured):
    # LLaVA's default strategy drops the class token: 4 image features, so its processor puts
    # 4 image tokens before the text. A count that differs fails the model's own check when it
    # runs ("Image features and image tokens do not match").
    configured(**_llava())
    model, inputs = hf_model("hf:llava", device="cpu")
    assert inputs[0].tolist() == [[110] * 4 + [0] * 60]
    with torch.no_grad():
        model(*inputs)  # runs for real
    graph = capture_spec("hf:llava")
    # The language model reads all 64 tokens: Q, K, V, out (32 x 32 each) and the gated
    # feed-forward (three 32 x 64), 2 FLOPs per multiply-add.
    tokens, width, ffn = 64, 32, 64
    layer = 4 * width * width + 3 * width * ffn
    assert _summed_in(graph, "language_model", "aten.mm.default") == 2 * tokens * layer


@pytest.mark.slow
def test_llava_next_tiles_its_images_and_is_told_their_size(configured):
    # 32 x 32 images, tiles of 32 x 32 in 16 x 16 patches. Of the grid's resolutions the image
    # fits 32 x 64 best (as large, least padding; 64 x 32 ties and comes later): 1 x 2 tiles and
    # the whole image, 3 tiles. Its features: the whole image's 2 x 2 patches, then the tiles'
    # 2 x 4 patches cut back to the image's square (2 x 2) with a newline after each row (2 x
    # 3): 4 + 6 = 10 image tokens. The model checks that count when it runs.
    configured(**_llava(image_grid_pinpoints=[[32, 64], [64, 32], [64, 64]]))
    model, inputs = hf_model("hf:llava_next", device="cpu")
    assert [tuple(t.shape) for t in inputs] == [(1, 64), (1, 64), (1, 3, 3, 32, 32)]
    assert inputs[0].tolist() == [[110] * 10 + [0] * 54]
    with torch.no_grad():
        model(*inputs)  # runs for real, told the image's size
    assert capture_spec("hf:llava_next").inputs[2].meta.shape == (1, 3, 3, 32, 32)


@pytest.mark.slow
def test_an_image_token_past_the_vocabulary_becomes_its_last_id(configured):
    # LLaVA's default configuration names token 32,000 of a 32,000-id vocabulary (checkpoints
    # add it to theirs): an id the embeddings do not hold fails a real run.
    configured(**_llava(image_token_id=120))
    model, inputs = hf_model("hf:llava", device="cpu")
    assert model.config.image_token_id == 119
    assert inputs[0].tolist() == [[119] * 4 + [0] * 60]
    with torch.no_grad():
        model(*inputs)  # runs for real


@pytest.mark.slow
def test_images_that_leave_no_room_for_text_are_an_input_error(configured):
    # 4 image features, for a language model of 4 positions.
    text = _llava()["text_config"] | dict(max_position_embeddings=4)
    configured(**_llava(text_config=text))
    with pytest.raises(InputError, match="its images take 4 tokens, and its language model"):
        hf_model("hf:llava", device="cpu")


@pytest.mark.slow
def test_blip2_without_an_image_token_puts_its_queries_at_its_vocabularys_last_id(configured):
    # The default configuration names no image token: the last id of the text vocabulary
    # (100 ids) is one, and the 4 queries go first in the text, where its processor puts them.
    configured(**_blip2())
    model, inputs = hf_model("hf:blip-2", device="cpu")
    assert model.config.image_token_id == 99
    assert inputs[1].tolist() == [[99] * 4 + [0] * 60]
    graph = capture_spec("hf:blip-2")
    addmm, bmm, mm = "aten.addmm.default", "aten.bmm.default", "aten.mm.default"
    # The vision tower: 2 x 2 patches and a class token, one layer of width 32, feed-forward 64.
    images, width, ffn = 5, 32, 64
    layer = 4 * width * width + 2 * width * ffn  # Q, K, V, out; feed-forward
    assert _summed_in(graph, "vision_model", addmm) == 2 * images * layer
    # The Q-Former's 4 queries: self-attention, cross-attention whose keys and values come from
    # the 5 image tokens, and a feed-forward.
    queries = 4
    qformer = 2 * queries * layer + 2 * (2 * queries + 2 * images) * width * width
    assert _summed_in(graph, "qformer", addmm) == qformer
    assert _summed_in(graph, "qformer", bmm) == 2 * 2 * queries * (queries + images) * width
    assert _summed_in(graph, "language_projection", addmm) == 2 * queries * width * width
    # The language model (OPT) reads all 64 tokens, its logits over the 100 ids included.
    seq, vocab = 64, 100
    assert _summed_in(graph, "language_model", addmm) == 2 * seq * layer
    assert _summed_in(graph, "language_model", bmm) == 2 * (2 * seq * seq * width)
    assert _summed_in(graph, "language_model", mm) == 2 * seq * width * vocab


@pytest.mark.slow
def test_flava_reads_text_and_images_from_its_image_config(configured):
    # FLAVA names its vision tower's configuration image_config: both towers and the
    # multimodal encoder run, not the text tower alone.
    configured(
        text_config=_layers(vocab_size=100, max_position_embeddings=16),
        image_config=_layers(image_size=32, patch_size=16),
        multimodal_config=_layers(),
    )
    graph = capture_spec("hf:flava")
    assert [v.meta.shape for v in graph.inputs] == [(1, 16), (1, 16), (1, 3, 32, 32)]
    # The patch embedding: 2 x 2 patches of 16 x 16 x 3 values, each into 32 channels.
    assert _summed(graph, "aten.convolution.default") == 2 * 4 * 32 * 16 * 16 * 3


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model_type", "fields", "message"),
    [
        ("minicpm_ocr", {}, r"names no image token \(image_token_id is None\)"),
        ("qwen2_vl", {}, r"patch grid as values \(image_grid_thw\)"),
        ("idefics2", {}, r"drop the images whose pixels are all zeros"),
    ],
    ids=["no-image-token", "grid-as-values", "images-by-mask"],
)
def test_images_with_no_place_in_the_text_are_an_input_error(
    configured, model_type, fields, message
):
    configured(**fields)
    with pytest.raises(InputError, match=message):
        hf_model(f"hf:{model_type}")


def test_a_model_whose_shapes_follow_values_fails_saying_so(configured):
    # ViLT keeps the patches its pixel mask marks valid (nonzero): a count of values.
    configured(**_layers(image_size=64, patch_size=32, max_position_embeddings=16, vocab_size=100))
    _, inputs = hf_model("hf:vilt")
    assert [tuple(t.shape) for t in inputs] == [(1, 16), (1, 16), (1, 3, 64, 64)]
    with pytest.raises(InputError, match="follows the values in a tensor"):
        capture_spec("hf:vilt")


@pytest.mark.slow
def test_switch_transformers_fails_saying_its_experts_follow_its_router(configured):
    # Each expert runs on the tokens routed to it, up to its capacity: a count of values.
    configured(d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2, num_experts=2)
    with pytest.raises(InputError, match=r"past an expert's expert_capacity dropped\), so how"):
        capture_spec("hf:switch_transformers")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model_type", "fields"),
    [
        ("encodec", _ENCODEC),
        ("blip-2", _blip2()),
    ],
    ids=["encodec", "blip-2"],
)
def test_infer_plan_places_a_model_captured_after_a_change(
    configured, tmp_path, capsys, model_type, fields
):
    from qosched.cli.main import main

    configured(**fields)
    path = tmp_path / "spec.yaml"
    path.write_text(
        "machine: {gpu: T4, link: PCIe3-x16, cpu_costs: roofline}\n"
        f"tenants:\n  - {{name: a, model: 'hf:{model_type}'}}\n"
    )
    assert main(["infer", "plan", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["throughput_rps"] > 0
