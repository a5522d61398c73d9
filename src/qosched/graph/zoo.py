"""Small reference models. Each factory returns ``(module, example_inputs)``.

The models are built on ``device`` (default ``"meta"``: no parameter memory is allocated and
nothing can run), so the zoo is cheap to capture. Pass ``device="cpu"`` for a runnable model.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

Factory = Callable[..., tuple[nn.Module, tuple[torch.Tensor, ...]]]


def _shortcut(c_in: int, c_out: int, stride: int) -> nn.Module:
    """A residual block's shortcut: identity, or a strided 1x1 projection with batch norm where
    the shape changes."""
    if stride == 1 and c_in == c_out:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))


class BasicBlock(nn.Module):
    """ResNet basic block: conv-bn-relu-conv-bn, plus identity (or 1x1 projection), then relu."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = _shortcut(c_in, c_out, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + self.shortcut(x))


class ResNet(nn.Module):
    """CIFAR-style ResNet: stem, three stages of basic blocks, global pool, classifier."""

    def __init__(self, widths: tuple[int, ...] = (64, 128, 256), blocks: int = 2) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()
        )
        layers: list[nn.Module] = []
        c = widths[0]
        for i, w in enumerate(widths):
            for b in range(blocks):
                layers.append(BasicBlock(c, w, stride=2 if (i > 0 and b == 0) else 1))
                c = w
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


class Bottleneck(nn.Module):
    """ResNet-50 bottleneck: 1x1 reduce, 3x3 (carrying the stride, as in torchvision's v1.5),
    1x1 expand by 4, each with batch norm; identity or 1x1 projection shortcut; relu."""

    expansion = 4

    def __init__(self, c_in: int, width: int, stride: int = 1) -> None:
        super().__init__()
        c_out = width * self.expansion
        self.conv1 = nn.Conv2d(c_in, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, c_out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c_out)
        self.shortcut = _shortcut(c_in, c_out, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return torch.relu(y + self.shortcut(x))


class ResNet50(nn.Module):
    """ResNet-50 for 3x224x224 ImageNet images: 7x7 stem, max pool, bottleneck stages of
    3-4-6-3 blocks (widths 64-128-256-512, outputs 4x), global pool, 1000-way classifier."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        layers: list[nn.Module] = []
        c = 64
        for i, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
            for b in range(blocks):
                layers.append(Bottleneck(c, width, stride=2 if (i > 0 and b == 0) else 1))
                c = width * Bottleneck.expansion
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


class DepthwiseSeparable(nn.Module):
    """MobileNet block: 3x3 depthwise conv-bn-relu6, then 1x1 pointwise conv-bn-relu6."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c_in, c_in, 3, stride, 1, groups=c_in, bias=False)
        self.bn1 = nn.BatchNorm2d(c_in)
        self.pw = nn.Conv2d(c_in, c_out, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.act = nn.ReLU6()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn2(self.pw(self.act(self.bn1(self.dw(x))))))


class MobileNet(nn.Module):
    """MobileNet-v1-style network at reduced width."""

    def __init__(self) -> None:
        super().__init__()
        cfg = [
            (32, 64, 1),
            (64, 128, 2),
            (128, 128, 1),
            (128, 256, 2),
            (256, 256, 1),
            (256, 512, 2),
            (512, 512, 1),
            (512, 1024, 2),
        ]
        self.stem = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()
        )
        self.blocks = nn.Sequential(*(DepthwiseSeparable(a, b, s) for a, b, s in cfg))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(1024, 100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


class SelfAttention(nn.Module):
    """Multi-head self-attention written from nn.Linear, matmul and softmax."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.out(ctx.transpose(1, 2).reshape(b, s, h))


class EncoderLayer(nn.Module):
    """Post-norm transformer encoder layer (BERT): attention and GELU feed-forward."""

    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.attn = SelfAttention(hidden, heads)
        self.ln1 = nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))
        self.ln2 = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.ffn(x))


class Bert(nn.Module):
    """BERT-style encoder: token + position embeddings, layer norm, encoder layers."""

    def __init__(
        self,
        vocab: int = 8192,
        seq: int = 128,
        hidden: int = 256,
        heads: int = 4,
        layers: int = 2,
        ffn: int = 1024,
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(seq, hidden)
        self.ln = nn.LayerNorm(hidden)
        self.layers = nn.Sequential(*(EncoderLayer(hidden, heads, ffn) for _ in range(layers)))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.layers(self.ln(self.tok(ids) + self.pos(pos)))


def resnet(batch: int = 1, device: str = "meta") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """ResNet-style CNN on 3x32x32 images (~2.8 M parameters, 6 residual blocks)."""
    with torch.device(device):
        return ResNet().eval(), (torch.randn(batch, 3, 32, 32),)


def mobilenet(batch: int = 1, device: str = "meta") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """MobileNet-v1-style CNN on 3x128x128 images (depthwise-separable blocks)."""
    with torch.device(device):
        return MobileNet().eval(), (torch.randn(batch, 3, 128, 128),)


def bert(batch: int = 1, device: str = "meta") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """BERT-style encoder: sequence 128, hidden 256, 4 heads, 2 layers, vocabulary 8192."""
    with torch.device(device):
        ids = torch.zeros(batch, 128, dtype=torch.long)
        return Bert().eval(), (ids,)


def resnet50(batch: int = 1, device: str = "meta") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """ResNet-50 (bottlenecks 3-4-6-3) on 3x224x224 images, ~25.6 M parameters."""
    with torch.device(device):
        return ResNet50().eval(), (torch.randn(batch, 3, 224, 224),)


def bert_base(batch: int = 1, device: str = "meta") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """BERT-base encoder: 12 layers, hidden 768, 12 heads, feed-forward 3072, sequence 128,
    WordPiece vocabulary 30522 (token and position embeddings; no segment embeddings or
    pooler), ~110 M parameters less the segment/pooler ones."""
    with torch.device(device):
        ids = torch.zeros(batch, 128, dtype=torch.long)
        model = Bert(vocab=30522, seq=128, hidden=768, heads=12, layers=12, ffn=3072)
        return model.eval(), (ids,)


def mlp(batch: int = 1, device: str = "meta") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Three-layer perceptron 784-512-256-10 with ReLU."""
    with torch.device(device):
        model = nn.Sequential(
            nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10)
        )
        return model.eval(), (torch.randn(batch, 784),)


ZOO: dict[str, Factory] = {
    "resnet": resnet,
    "mobilenet": mobilenet,
    "bert": bert,
    "mlp": mlp,
    "resnet50": resnet50,
    "bert_base": bert_base,
}
