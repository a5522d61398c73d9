"""``cnn``: a three-layer conv net classifying 1x28x28 images of ten noisy class patterns."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from qosched.workloads.base import (
    Batch,
    TrainingState,
    check_batch_size,
    check_seed,
    seeded_generator,
    train_step,
)
from qosched.workloads.optim import Adam

NUM_CLASSES = 10
IMAGE_SIZE = 28


class SmallConvNet(nn.Module):
    """(conv-bn-relu-pool) x2, conv-bn-relu, global average pool, linear: ~57k parameters."""

    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 3, padding=1),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


class PatternImages:
    """Each class is a smooth random pattern; a sample is that pattern, randomly dimmed and
    shifted, under heavy pixel noise, so the net has to learn shapes rather than read one pixel."""

    def __init__(self, seed: int, batch_size: int) -> None:
        self.seed = seed
        self.batch_size = batch_size
        coarse = torch.randn(NUM_CLASSES, 1, 7, 7, generator=seeded_generator(seed, "cnn/patterns"))
        patterns = F.interpolate(coarse, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear")
        flat = patterns.flatten(1)
        normalised = (flat - flat.mean(1, keepdim=True)) / flat.std(1, keepdim=True)
        self.patterns = normalised.view_as(patterns)

    def batch(self, iteration: int) -> Batch:
        g = seeded_generator(self.seed, "cnn/batch", iteration)
        n = self.batch_size
        labels = torch.randint(0, NUM_CLASSES, (n,), generator=g)
        contrast = 0.4 + 0.6 * torch.rand(n, 1, 1, 1, generator=g)
        images = contrast * self.patterns[labels]
        # One random shift per batch (cheap) still keeps the position of a pattern uninformative.
        dy, dx = (int(v) for v in torch.randint(-3, 4, (2,), generator=g))
        images = torch.roll(images, shifts=(dy, dx), dims=(2, 3))
        images = images + torch.randn(n, 1, IMAGE_SIZE, IMAGE_SIZE, generator=g)
        return images, labels


def _cross_entropy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(images), labels)


class CnnWorkload:
    """Adam on ``SmallConvNet``; about 50 ms per iteration on one core at the default batch."""

    name = "cnn"
    default_batch_size = 64
    learning_rate = 2e-3

    def build(self, seed: int, batch_size: int | None = None) -> TrainingState:
        seed = check_seed(seed)
        batch_size = check_batch_size(batch_size, self.default_batch_size)
        torch.manual_seed(seed)
        model = SmallConvNet()
        optimizer = Adam(model.parameters(), lr=self.learning_rate)
        return TrainingState(
            self.name, seed, batch_size, model, optimizer, PatternImages(seed, batch_size)
        )

    def step(self, state: TrainingState) -> float:
        return train_step(state, _cross_entropy)
