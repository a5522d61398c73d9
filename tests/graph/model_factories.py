"""Factories loaded by import path in test_capture.py (``model_factories:tiny``)."""

import torch
from torch import nn


def tiny():
    with torch.device("meta"):
        return nn.Linear(4, 2), (torch.empty(3, 4),)


def wrong_shape():
    return nn.Linear(4, 2)


not_callable = 42


def raises():
    raise RuntimeError("no weights here\nand a second line")
