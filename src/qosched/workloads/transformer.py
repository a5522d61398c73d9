"""``transformer``: a two-layer causal transformer LM on sentences of a seeded 2nd-order grammar."""

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

VOCAB = 32
SEQ_LEN = 64
SUCCESSORS = 3  # allowed next tokens per two-token context


class TinyLM(nn.Module):
    """Token + learned position embeddings, pre-norm encoder layers under a causal mask, LM head."""

    def __init__(
        self, vocab: int = VOCAB, seq_len: int = SEQ_LEN, d_model: int = 64, layers: int = 2
    ) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(seq_len, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model,
            nhead=4,
            dim_feedforward=4 * d_model,
            # No dropout: training then draws nothing from the global generator, which keeps
            # resumed runs bit-identical without depending on generator state.
            dropout=0.0,
            batch_first=True,
            norm_first=True,
        )
        # Nested tensors only apply to padded eval batches; turning them off silences a warning.
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        positions = torch.arange(length, device=tokens.device)
        x = self.tokens(tokens) + self.positions(positions)
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=tokens.device)
        x = self.encoder(x, mask=mask, is_causal=True)
        return self.head(self.norm(x))


class GrammarSentences:
    """Token ``t+1`` is one of a few successors allowed after token ``t``, weighted by the pair
    ``(t-1, t)``.

    A bigram table quickly takes the loss from the uniform ``ln 32`` to about ``ln 3``; going
    further needs the token before, so attention has to be used, not just an embedding lookup.
    """

    def __init__(self, seed: int, batch_size: int) -> None:
        self.seed = seed
        self.batch_size = batch_size
        g = seeded_generator(seed, "transformer/grammar")
        successors = torch.stack(
            [torch.randperm(VOCAB, generator=g)[:SUCCESSORS] for _ in range(VOCAB)]
        )
        weights = torch.softmax(2.0 * torch.randn(VOCAB, VOCAB, SUCCESSORS, generator=g), dim=2)
        # transitions[prev * VOCAB + last] is the distribution of the next token.
        allowed = successors.expand(VOCAB, VOCAB, SUCCESSORS)
        table = torch.zeros(VOCAB, VOCAB, VOCAB).scatter_(2, allowed, weights)
        self.transitions = table.reshape(VOCAB * VOCAB, VOCAB)

    def batch(self, iteration: int) -> Batch:
        g = seeded_generator(self.seed, "transformer/batch", iteration)
        n = self.batch_size
        sentence = torch.empty(n, SEQ_LEN + 1, dtype=torch.long)
        sentence[:, :2] = torch.randint(0, VOCAB, (n, 2), generator=g)
        for t in range(2, SEQ_LEN + 1):
            context = sentence[:, t - 2] * VOCAB + sentence[:, t - 1]
            sentence[:, t] = torch.multinomial(self.transitions[context], 1, generator=g).squeeze(1)
        return sentence[:, :-1], sentence[:, 1:]


def _next_token_loss(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(tokens)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class TransformerWorkload:
    """AdamW on ``TinyLM``; about 50 ms per iteration on one core at the default batch."""

    name = "transformer"
    default_batch_size = 32
    learning_rate = 3e-3

    def build(self, seed: int, batch_size: int | None = None) -> TrainingState:
        seed = check_seed(seed)
        batch_size = check_batch_size(batch_size, self.default_batch_size)
        torch.manual_seed(seed)
        model = TinyLM()
        optimizer = Adam(
            model.parameters(), lr=self.learning_rate, weight_decay=0.01, decoupled=True
        )
        data = GrammarSentences(seed, batch_size)
        return TrainingState(self.name, seed, batch_size, model, optimizer, data)

    def step(self, state: TrainingState) -> float:
        return train_step(state, _next_token_loss)
