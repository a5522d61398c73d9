"""Models from Hugging Face ``transformers``, built from a default configuration: no weights, no
download (optional extra ``qosched[transformers]``).

``hf:<model_type>`` (``hf:bert``, ``hf:gpt2``, ``hf:vit``, ...) builds
``AutoModel.from_config(AutoConfig.for_model(model_type))`` on the requested device, with example
inputs for the model's main input: token ids ``(batch, seq)`` for text models, images
``(batch, channels, size, size)`` at the configuration's size for vision models.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from qosched.core.errors import InputError

PREFIX = "hf:"


def hf_model(
    spec: str, batch: int = 1, device: str = "meta", seq: int = 128
) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model and example inputs for ``hf:<model_type>``; InputError when ``transformers``
    is missing, the type is unknown, or its main input is neither token ids nor images."""
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
    with torch.device(device):
        model = AutoModel.from_config(config).eval()
        return model, (_example_input(model, config, spec, batch, seq),)


def _example_input(model: nn.Module, config: Any, spec: str, batch: int, seq: int) -> torch.Tensor:
    name = getattr(model, "main_input_name", "input_ids")
    if name == "input_ids":
        limit = getattr(config, "max_position_embeddings", seq) or seq
        return torch.zeros(batch, min(seq, limit), dtype=torch.long)
    if name == "pixel_values":
        size = getattr(config, "image_size", 224)
        size = size[0] if isinstance(size, list | tuple) else size
        return torch.randn(batch, getattr(config, "num_channels", 3), size, size)
    raise InputError(
        f"model {spec!r}: main input {name!r} is neither token ids nor images; wrap the model in "
        "a 'package.module:factory' that builds its inputs",
        field="model",
    )
