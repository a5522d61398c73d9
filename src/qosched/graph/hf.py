"""Models from Hugging Face ``transformers``, built from a default configuration: no weights, no
download (optional extra ``qosched[transformers]``).

``hf:<model_type>`` (``hf:bert``, ``hf:llama``, ``hf:t5``, ``hf:vit``, ``hf:whisper``, ...) builds
``AutoModel.from_config(AutoConfig.for_model(model_type))`` on the requested device, with example
inputs for what the model reads:

- text: token ids ``(batch, seq)``, ``seq`` capped at the configuration's positions;
- images: ``(batch, channels, size, size)`` at the configuration's size;
- speech as samples (wav2vec2, HuBERT): one second at 16 kHz, ``(batch, 16000)``;
- speech as features (Whisper): ``(batch, mel bins, frames)`` for the encoder's 30 s window;
  Speech2Text reads the same 30 s frames first, ``(batch, 3000, features)``;
- an encoder-decoder (T5, BART, Whisper) also gets decoder token ids ``(batch, seq)`` (capped at
  its target positions): one teacher-forced pass, the cost of scoring a sequence;
- a text-and-image model (CLIP and its kind) gets both token ids and images.

A decoder-only language model (GPT-2, Llama, Mistral, ...) is built with ``use_cache=False``: one
forward pass over the prompt (the prefill), without the key-value cache a generation loop would
carry to its next step; that cache is not a tensor ``torch.export`` can return.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from qosched.core.errors import InputError

PREFIX = "hf:"
#: One second of speech at the sample rate of wav2vec2-style models.
AUDIO_SAMPLES = 16_000
#: Whisper's encoder reads 30 s of log-mel frames: twice its source positions (3,000 frames).
WHISPER_FRAMES = 3000


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
        names, inputs = _example_inputs(model, config, spec, batch, seq)
    if names != [getattr(model, "main_input_name", "input_ids")]:
        _take_by_position(model, names)
    return model, inputs


def _take_by_position(model: nn.Module, names: list[str]) -> None:
    """Make ``model`` take ``names`` by position. ``torch.export`` and the runtimes pass example
    inputs by position, and a model that reads more than one input (or not as its first
    parameter) wants them by name. The model's own ``forward`` is replaced on the instance, not
    wrapped in another module, so that its operators keep their module paths (the layer-level
    baseline cuts where the top-level module changes)."""
    by_name = model.forward

    def forward(*inputs: torch.Tensor) -> Any:
        return by_name(**dict(zip(names, inputs, strict=True)))

    model.forward = forward  # type: ignore[method-assign]
    model.input_names = tuple(names)  # what each position is, for whoever prints it


def _example_inputs(
    model: nn.Module, config: Any, spec: str, batch: int, seq: int
) -> tuple[list[str], tuple[torch.Tensor, ...]]:
    """The names and tensors of the inputs the model is called with."""
    main = getattr(model, "main_input_name", "input_ids")
    reads = set(inspect.signature(model.forward).parameters)
    names = [main]
    if main == "input_ids" and "pixel_values" in reads and hasattr(config, "vision_config"):
        names.append("pixel_values")  # text and images: both towers run
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in reads:
        names.append("decoder_input_ids")
    return names, tuple(_tensor(name, config, spec, batch, seq) for name in names)


def _tensor(name: str, config: Any, spec: str, batch: int, seq: int) -> torch.Tensor:
    if name == "input_ids":
        text = getattr(config, "text_config", None) or config
        return _tokens(batch, seq, getattr(text, "max_position_embeddings", None))
    if name == "decoder_input_ids":
        limit = getattr(config, "max_target_positions", None) or getattr(
            config, "max_position_embeddings", None
        )
        return _tokens(batch, seq, limit)
    if name == "pixel_values":
        vision = getattr(config, "vision_config", None) or config
        size = getattr(vision, "image_size", 224)
        size = size[0] if isinstance(size, list | tuple) else size
        return torch.randn(batch, getattr(vision, "num_channels", 3), size, size)
    if name == "input_values":
        return torch.randn(batch, AUDIO_SAMPLES)
    if name == "input_features":
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


def _tokens(batch: int, seq: int, limit: int | None) -> torch.Tensor:
    # A model without learned positions (XLNet's are relative) may give -1 for its limit.
    if limit is None or limit <= 0:
        limit = seq
    return torch.zeros(batch, min(seq, limit), dtype=torch.long)
