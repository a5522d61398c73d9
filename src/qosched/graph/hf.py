"""Models from Hugging Face ``transformers``, built from a default configuration: no weights, no
download (optional extra ``qosched[transformers]``).

``hf:<model_type>`` (``hf:bert``, ``hf:llama``, ``hf:t5``, ``hf:vit``, ``hf:whisper``, ...) builds
``AutoModel.from_config(AutoConfig.for_model(model_type))`` on the requested device, with example
inputs for what the model reads:

- text: token ids ``(batch, seq)``, ``seq`` capped at the configuration's positions, and an
  attention mask of ones where the model reads one (a tokenizer's mask for a batch without
  padding; LongT5 and Switch Transformers cannot do without it);
- images: ``(batch, channels, size, size)`` at the configuration's size; a video model (one
  with ``num_frames``: VideoMAE, TimeSformer) reads a clip, ``(batch, frames, channels, size,
  size)``; SigLIP 2 reads its ``num_patches`` patches, ``(batch, patches, channels * patch *
  patch)``, with a mask of ones and each image's square patch grid ``(batch, 2)``;
- speech as samples (wav2vec2, HuBERT): one second at 16 kHz, ``(batch, 16000)``; a codec with
  ``audio_channels`` (EnCodec) one second at its sampling rate, ``(batch, channels, samples)``;
- speech as features (Whisper): ``(batch, mel bins, frames)`` for the encoder's 30 s window;
  Speech2Text reads the same 30 s frames first, ``(batch, 3000, features)``;
- an encoder-decoder (T5, BART, Whisper) also gets decoder token ids ``(batch, seq)`` (capped at
  its target positions): one teacher-forced pass, the cost of scoring a sequence;
- a text-and-image model (CLIP and its kind) gets both token ids and images; a model that puts
  its images into its text (LLaVA, PaliGemma, BLIP-2) gets them as its processor gives them:
  its image token once per image feature (as many as its ``get_image_features`` makes from the
  images; BLIP-2's ``num_query_tokens``), then the ``seq`` text tokens, capped at its
  language model's positions; one that must be told each image's size (LLaVA-NeXT, LLaVA
  OneVision) is told the vision tower's square size, as a constant, and gets its images cut
  into the tiles its processor makes for that size, ``(batch, tiles, channels, size, size)``;
- a text-and-audio model (CLAP) gets token ids and a log-mel spectrogram as a one-channel
  image, ``(batch, 1, frames, mel bins)``: the 1,001 frames its feature extractor pads 10 s
  to, or as many as its encoder takes if fewer.

Some models need a change that leaves what they compute as it was before ``torch.export`` can
follow them (``_name_query_image_token``, ``_FOR_CAPTURE``):

- BLIP-2, whose default configuration names no image token, gets the last id of its text
  vocabulary as one: a checkpoint's processor adds its own image token there (after the
  tokenizer's words); which id it is changes no shape and no FLOP;
- EnCodec keeps each convolution's kernel size, stride and padding in tensors (buffers), whose
  values a capture with data-free tensors does not have; they become the integers they are
  built from, as in the original EnCodec code.

A model that puts its images into its text at an image token its default configuration does not
name (``minicpm_ocr``), that reads each image's patch grid as values (Qwen2-VL), or that drops
the images whose pixels are all zeros, a batch's padding (Idefics2), or that keeps the image
patches its pixel mask marks as real (ViLT: ``nonzero``, then a random draw), is an InputError:
none can be captured from data-free tensors of the right shapes. Switch Transformers runs each
expert on the tokens its router sent there (a loop over the experts that got tokens, the tokens
past an expert's ``expert_capacity`` dropped), so what its experts compute follows the router's
values; its capture fails saying so (``_CAPTURE_PROBLEMS``).

A decoder-only language model (GPT-2, Llama, Mistral, ...) is built with ``use_cache=False``: one
forward pass over the prompt (the prefill), without the key-value cache a generation loop would
carry to its next step; that cache is not a tensor ``torch.export`` can return.
"""

from __future__ import annotations

import inspect
import math
import sys
import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from qosched.core.errors import InputError

PREFIX = "hf:"
#: One second of speech at the sample rate of wav2vec2-style models.
AUDIO_SAMPLES = 16_000
#: Whisper's encoder reads 30 s of log-mel frames: twice its source positions (3,000 frames).
WHISPER_FRAMES = 3000
#: CLAP's feature extractor pads 10 s at 48 kHz, in hops of 480 samples, to 1,001 frames.
CLAP_FRAMES = 1001


def hf_model(
    spec: str, batch: int = 1, device: str = "meta", seq: int = 128
) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model and example inputs for ``hf:<model_type>``; InputError when ``transformers``
    (or a library it needs for this model) is missing, the type is unknown, its default
    configuration builds no model, or its inputs are of a kind not listed in the module
    docstring."""
    model_type = spec.removeprefix(PREFIX)
    try:
        from transformers import AutoConfig, AutoModel
    except ImportError as e:
        raise InputError(
            f"model {spec!r} needs the optional extra: pip install 'qosched[transformers]'",
            field="model",
        ) from e
    try:
        config = AutoConfig.for_model(model_type)
    except ValueError as e:
        raise InputError(
            f"model {spec!r}: transformers has no model type {model_type!r}", field="model"
        ) from e
    # See the module docstring; a multimodal model (LLaVA) keeps its language model's setting
    # in the text configuration.
    for part in (config, getattr(config, "text_config", None)):
        if hasattr(part, "use_cache"):
            part.use_cache = False
    _name_query_image_token(config)
    with torch.device(device):
        try:
            model = AutoModel.from_config(config).eval()
        except ImportError as e:  # e.g. DETR's backbone needs timm
            first = next((line for line in str(e).splitlines() if line.strip()), str(e))
            raise InputError(
                f"model {spec!r}: transformers needs another library for it: {first.strip()}",
                field="model",
            ) from e
        except Exception as e:  # e.g. ESM's default configuration has no vocabulary size
            raise InputError(
                f"model {spec!r}: transformers cannot build it from its default configuration: "
                f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                field="model",
            ) from e
        names, inputs, constants = _example_inputs(model, config, spec, batch, seq)
    if model_type in _FOR_CAPTURE:
        _FOR_CAPTURE[model_type](model)
    if model_type in _CAPTURE_PROBLEMS:
        model.capture_problem = _CAPTURE_PROBLEMS[model_type]  # read by capture if it fails
    if names != [getattr(model, "main_input_name", "input_ids")] or constants:
        _take_by_position(model, names, constants)
    return model, inputs


def _name_query_image_token(config: Any) -> None:
    """Give a model that puts its images into its text an image token inside its text
    vocabulary: the last id of that vocabulary where its default configuration names none
    (BLIP-2 and InstructBLIP, whose ``num_query_tokens`` queries go there) or names one past its
    end (LLaVA's 32,000 of 32,000 ids, Janus's 100,581 of 32,000). A checkpoint's processor adds
    an image token after its tokenizer's words, inside the vocabulary the embeddings are sized
    for (BLIP-2 OPT: 50,265 of 50,272); which id changes nothing the model computes, only where
    the images go, and an id past the embeddings fails a real run."""
    text = getattr(config, "text_config", None)
    vocabulary = getattr(text, "vocab_size", None)
    if not isinstance(vocabulary, int) or vocabulary < 1:
        return
    token = _image_token_id(config)
    if token is None and getattr(config, "num_query_tokens", None) is None:
        return  # no place for images in its text: an InputError (_check_image_tokens)
    if token is None or token >= vocabulary:
        config.image_token_id = vocabulary - 1
        if hasattr(config, "image_token_index"):
            config.image_token_index = vocabulary - 1


def _encodec_integer_geometry(model: nn.Module) -> None:
    """EnCodec's convolutions keep their kernel size, stride and total padding in tensors
    (buffers) and compute their padding with tensor arithmetic, so a capture from data-free
    tensors cannot tell how long each padded input is. Make them the integers they are built
    from and compute the padding as the original EnCodec code does, in integers: the same
    padding, the same convolutions."""
    from transformers.models.encodec.modeling_encodec import EncodecConv1d

    for module in model.modules():
        if not isinstance(module, EncodecConv1d):
            continue
        conv = module.conv
        stride = conv.stride[0]
        kernel = (conv.kernel_size[0] - 1) * conv.dilation[0] + 1  # with dilation
        for name, value in (("stride", stride), ("kernel_size", kernel)):
            del module._buffers[name]
            setattr(module, name, value)
        del module._buffers["padding_total"]
        module.padding_total = kernel - stride
        module._get_extra_padding_for_conv1d = types.MethodType(_extra_padding, module)


def _extra_padding(self: nn.Module, hidden_states: torch.Tensor) -> int:
    """EnCodec's ``_get_extra_padding_for_conv1d`` in integers: the right padding that makes the
    last frame whole."""
    length = hidden_states.shape[-1]
    frames = math.ceil((length - self.kernel_size + self.padding_total) / self.stride + 1) - 1
    return frames * self.stride + self.kernel_size - self.padding_total - length


#: Per kind (``model_type``), a change that lets ``torch.export`` follow the model without
#: changing what it computes (see the module docstring).
_FOR_CAPTURE: dict[str, Callable[[nn.Module], None]] = {
    "encodec": _encodec_integer_geometry,
}

#: Per kind, why ``torch.export`` cannot capture it: what the capture's error says.
_CAPTURE_PROBLEMS: dict[str, str] = {
    "switch_transformers": (
        "its experts run on the tokens its router sends them (a loop over the experts that got "
        "tokens, each over its own tokens, the tokens past an expert's expert_capacity "
        "dropped), so how many tokens each expert computes follows the router's values, and "
        "transformers has no fixed-shape dispatch for it (no experts_implementation); a "
        "capture from data-free tensors cannot count them"
    ),
}


def _take_by_position(
    model: nn.Module, names: list[str], constants: dict[str, Any] | None = None
) -> None:
    """Make ``model`` take ``names`` by position, with ``constants`` (arguments that are not
    tensors) by name. ``torch.export`` and the runtimes pass example inputs by position, and a
    model that reads more than one input (or not as its first parameter) wants them by name.
    The model's own ``forward`` is replaced on the instance, not wrapped in another module, so
    that its operators keep their module paths (the layer-level baseline cuts where the
    top-level module changes)."""
    by_name = model.forward
    fixed = dict(constants or {})

    def forward(*inputs: torch.Tensor) -> Any:
        return by_name(**dict(zip(names, inputs, strict=True)), **fixed)

    model.forward = forward  # type: ignore[method-assign]
    model.input_names = tuple(names)  # what each position is, for whoever prints it


def _example_inputs(
    model: nn.Module, config: Any, spec: str, batch: int, seq: int
) -> tuple[list[str], tuple[torch.Tensor, ...], dict[str, Any]]:
    """The names and tensors of the inputs the model is called with, and the arguments it is
    called with as constants (`_image_sizes`)."""
    main = getattr(model, "main_input_name", "input_ids")
    reads = set(inspect.signature(model.forward).parameters)
    names = [main]
    if main == "pixel_values" and "input_ids" in reads and hasattr(config, "text_config"):
        names.append("input_ids")  # BLIP-2: images, and the text its language model reads
    if "input_ids" in names and "attention_mask" in reads:
        names.append("attention_mask")
    if main == "input_ids" and "pixel_values" in reads and _images(config) is not None:
        names.append("pixel_values")  # text and images: both towers run
    if "pixel_values" in names and "spatial_shapes" in reads:
        names += ["pixel_attention_mask", "spatial_shapes"]  # SigLIP 2 reads images as patches
    if main == "input_ids" and "input_features" in reads and hasattr(config, "audio_config"):
        names.append("input_features")  # text and audio (CLAP)
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in reads:
        names.append("decoder_input_ids")
    image_tokens, constants = 0, {}
    tensors: dict[str, torch.Tensor] = {}
    if "pixel_values" in names and "input_ids" in names:
        _check_image_tokens(config, spec, reads)
        if _needs_image_sizes(model):
            tensors["pixel_values"], constants = _image_sizes(model, config, batch)
        else:
            tensors["pixel_values"] = _tensor("pixel_values", names, config, spec, batch, seq)
        image_tokens = _image_tokens_per_prompt(
            model, config, spec, tensors["pixel_values"], constants
        )
    inputs = tuple(
        tensors[name]
        if name in tensors
        else _tensor(name, names, config, spec, batch, seq, image_tokens)
        for name in names
    )
    return names, inputs, constants


def _needs_image_sizes(model: nn.Module) -> bool:
    """Whether the model must be told each image's size: its ``get_image_features`` takes
    ``image_sizes`` without a default (LLaVA, which takes it only for a Pixtral tower, has one)."""
    get_features = getattr(model, "get_image_features", None)
    if get_features is None:
        return False
    parameter = inspect.signature(get_features).parameters.get("image_sizes")
    return parameter is not None and parameter.default is inspect.Parameter.empty


def _image_sizes(model: nn.Module, config: Any, batch: int) -> tuple[torch.Tensor, dict]:
    """Images for a model told each image's size (LLaVA-NeXT, LLaVA OneVision), and that size:
    square images at the vision tower's size, given as a constant, not a tensor (the number of
    tiles and image tokens follows its values, which a capture from data-free tensors does not
    have). A model that tiles its images (``image_grid_pinpoints``) gets its tiles as its
    processor gives them, ``(batch, tiles, channels, size, size)``, as many as its own
    ``image_size_to_num_patches`` counts for that size."""
    vision = _images(config)
    size = _side(vision)
    sizes = {"image_sizes": [[size, size]] * batch}
    images = _pixels(vision, batch, patches=False)
    count_tiles = getattr(sys.modules[type(model).__module__], "image_size_to_num_patches", None)
    pinpoints = getattr(config, "image_grid_pinpoints", None)
    if pinpoints and count_tiles is not None:
        tiles = count_tiles(image_size=(size, size), grid_pinpoints=pinpoints, patch_size=size)
        return images[:, None].repeat(1, tiles, 1, 1, 1), sizes
    return images, sizes


def _image_token_id(config: Any) -> int | None:
    token = getattr(config, "image_token_id", None)
    return token if token is not None else getattr(config, "image_token_index", None)


def _image_tokens_per_prompt(
    model: nn.Module, config: Any, spec: str, pixels: Any, constants: dict[str, Any]
) -> int:
    """How many image tokens each prompt holds: one per feature vector the model puts into its
    text, which it checks when it runs (a count that differs is an error there). BLIP-2 puts its
    ``num_query_tokens`` queries; LLaVA and its kind what ``get_image_features`` makes of the
    images, counted from its shapes (on a model built on ``meta``, nothing is computed). 0 for
    a model that reads text and images side by side (CLIP)."""
    if _image_token_id(config) is None:
        return 0
    queries = getattr(config, "num_query_tokens", None)
    if queries is not None:
        return queries
    get_features = getattr(model, "get_image_features", None)
    if get_features is None:
        return 0
    try:
        with torch.no_grad():
            out = get_features(pixel_values=pixels, **constants)
    except Exception as e:  # an older transformers, or arguments this kind needs
        raise InputError(
            f"model {spec!r}: cannot tell how many image tokens its text needs: "
            f"get_image_features failed ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''})",
            field="model",
        ) from e
    # Newer transformers return the features as the output's pooler_output (a tensor, or one
    # per image), older ones the features themselves.
    features = getattr(out, "pooler_output", out)
    parts = list(features) if isinstance(features, list | tuple) else [features]
    width = parts[0].shape[-1]
    return sum(part.numel() for part in parts) // width // pixels.shape[0]


def _check_image_tokens(config: Any, spec: str, reads: set[str]) -> None:
    """InputError for a model that puts images into its text where none can go from shapes
    alone: at image tokens its configuration does not name (``minicpm_ocr``'s default), in a
    patch grid given as values (Qwen2-VL's ``image_grid_thw``), or after dropping the images
    whose pixels are all zeros (Idefics2), which a capture with data-free tensors cannot
    follow."""
    if hasattr(config, "image_token_id") and config.image_token_id is None:
        raise InputError(
            f"model {spec!r}: its default configuration names no image token (image_token_id is "
            "None), so its text has no place for the images; wrap the model in a "
            "'package.module:factory' with a configuration that names one",
            field="model",
        )
    if "image_grid_thw" in reads:
        raise InputError(
            f"model {spec!r}: it reads each image's patch grid as values (image_grid_thw), and "
            "its shapes follow them; a capture from data-free tensors cannot",
            field="model",
        )
    if "pixel_attention_mask" in reads and "spatial_shapes" not in reads:
        raise InputError(
            f"model {spec!r}: it reads images with a pixel mask (pixel_attention_mask) and "
            "picks from values which of them it encodes (Idefics2 and its kind drop the images "
            "whose pixels are all zeros, a batch's padding images, and split the rest among the "
            "prompts by their counts), so how many it encodes follows values, not shapes; a "
            "capture from data-free tensors cannot",
            field="model",
        )


def _images(config: Any) -> Any:
    """The configuration that gives the image size: the vision tower's (FLAVA calls it
    ``image_config``), or the model's own when one transformer reads both text and images
    (ViLT); None for a model without images."""
    for name in ("vision_config", "image_config"):
        vision = getattr(config, name, None)
        if vision is not None:
            return vision
    return config if hasattr(config, "image_size") else None


def _tensor(
    name: str,
    names: list[str],
    config: Any,
    spec: str,
    batch: int,
    seq: int,
    image_tokens: int = 0,
) -> torch.Tensor:
    if name == "input_ids":
        text = getattr(config, "text_config", None) or config
        ids = _tokens(batch, image_tokens + seq, getattr(text, "max_position_embeddings", None))
        if image_tokens:
            if ids.shape[1] <= image_tokens:
                raise InputError(
                    f"model {spec!r}: its images take {image_tokens} tokens, and its language "
                    f"model reads at most {ids.shape[1]}: no room for text",
                    field="model",
                )
            ids[:, :image_tokens] = _image_token_id(config)  # first, as its processor puts them
        return ids
    if name == "attention_mask":  # all ones: a tokenizer's mask for a batch without padding
        return torch.ones_like(_tensor("input_ids", names, config, spec, batch, seq, image_tokens))
    if name == "decoder_input_ids":
        limit = getattr(config, "max_target_positions", None) or getattr(
            config, "max_position_embeddings", None
        )
        return _tokens(batch, seq, limit)
    if name == "pixel_values":
        return _pixels(_images(config) or config, batch, patches="spatial_shapes" in names)
    if name == "pixel_attention_mask":
        return torch.ones(batch, _images(config).num_patches, dtype=torch.long)
    if name == "spatial_shapes":  # each image's patch grid, (rows, columns): square
        side = math.isqrt(_images(config).num_patches)
        return torch.full((batch, 2), side, dtype=torch.long)
    if name == "input_values":
        channels = getattr(config, "audio_channels", None)
        if channels is not None:  # a codec (EnCodec): (batch, channels, samples) at its rate
            return torch.randn(batch, channels, config.sampling_rate)
        return torch.randn(batch, AUDIO_SAMPLES)
    if name == "input_features":
        audio = getattr(config, "audio_config", None)
        if audio is not None:  # CLAP: a log-mel spectrogram as a one-channel image
            channels = 4 if getattr(audio, "enable_fusion", False) else 1
            # Its encoder takes at most spec_size frames per mel bin's share of the spectrum.
            most = audio.spec_size * (audio.spec_size // audio.num_mel_bins)
            frames = min(CLAP_FRAMES, most)
            return torch.randn(batch, channels, frames, audio.num_mel_bins)
        per_channel = getattr(config, "input_feat_per_channel", None)
        if per_channel is not None:  # Speech2Text reads frames first: (batch, frames, features)
            features = per_channel * getattr(config, "input_channels", 1)
            return torch.randn(batch, WHISPER_FRAMES, features)
        frames = 2 * getattr(config, "max_source_positions", WHISPER_FRAMES // 2)
        return torch.randn(batch, getattr(config, "num_mel_bins", 80), frames)
    raise InputError(
        f"model {spec!r}: main input {name!r} is none of token ids, images or speech; wrap the "
        "model in a 'package.module:factory' that builds its inputs",
        field="model",
    )


def _pixels(vision: Any, batch: int, patches: bool) -> torch.Tensor:
    """Images ``(batch, channels, size, size)``; a video model's clip of ``num_frames`` of them,
    frames first ``(batch, frames, channels, size, size)``; SigLIP 2's images cut into its
    ``num_patches`` patches, ``(batch, patches, channels * patch * patch)``."""
    channels = getattr(vision, "num_channels", 3)
    if patches:
        return torch.randn(batch, vision.num_patches, channels * vision.patch_size**2)
    size = _side(vision)
    frames = getattr(vision, "num_frames", None)
    if frames is not None:
        return torch.randn(batch, frames, channels, size, size)
    return torch.randn(batch, channels, size, size)


def _side(vision: Any) -> int:
    """The side of the square images the vision configuration reads (224 where it says none)."""
    size = getattr(vision, "image_size", 224)
    return size[0] if isinstance(size, list | tuple) else size


def _tokens(batch: int, seq: int, limit: int | None) -> torch.Tensor:
    # A model without learned positions (XLNet's are relative) may give -1 for its limit.
    if limit is None or limit <= 0:
        limit = seq
    return torch.zeros(batch, min(seq, limit), dtype=torch.long)
