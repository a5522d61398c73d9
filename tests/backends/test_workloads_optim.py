"""The built-in workloads' optimizer: torch's Adam and AdamW updates, without loading
``torch._dynamo`` (which any ``torch.optim`` optimizer imports, at seconds per runner start)."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from qosched.core.errors import InputError
from qosched.workloads.optim import Adam

pytestmark = pytest.mark.process


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


def train(net: nn.Module, optimizer, steps: int) -> None:
    for i in range(steps):
        g = torch.Generator().manual_seed(i)
        inputs, targets = torch.randn(5, 6, generator=g), torch.randint(0, 3, (5,), generator=g)
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(net(inputs), targets).backward()
        optimizer.step()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("decoupled", "reference"),
    [
        (False, lambda params: torch.optim.Adam(params, lr=0.01, weight_decay=0.1)),
        (True, lambda params: torch.optim.AdamW(params, lr=0.01, weight_decay=0.1)),
    ],
    ids=["adam", "adamw"],
)
def test_updates_as_torch_optim_does(decoupled: bool, reference) -> None:
    ours, theirs = model(), model()
    train(ours, Adam(ours.parameters(), 0.01, weight_decay=0.1, decoupled=decoupled), 20)
    train(theirs, reference(theirs.parameters()), 20)
    for mine, expected in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(mine, expected, rtol=1e-5, atol=1e-6)


def test_a_restored_state_continues_exactly() -> None:
    uninterrupted = model()
    train(uninterrupted, Adam(uninterrupted.parameters(), 0.01), 6)
    first = model()
    optimizer = Adam(first.parameters(), 0.01)
    train(first, optimizer, 3)
    second = copy.deepcopy(first)
    restored = Adam(second.parameters(), 0.01)
    restored.load_state_dict(optimizer.state_dict())
    # Training on continues from step 3, on the same batches as the uninterrupted run.
    for i in range(3, 6):
        g = torch.Generator().manual_seed(i)
        inputs, targets = torch.randn(5, 6, generator=g), torch.randint(0, 3, (5,), generator=g)
        restored.zero_grad()
        nn.functional.cross_entropy(second(inputs), targets).backward()
        restored.step()
    for mine, expected in zip(second.parameters(), uninterrupted.parameters(), strict=True):
        assert torch.equal(mine, expected)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda s: s.update(steps=-1), "steps"),
        (lambda s: s.update(exp_avg=s["exp_avg"][:-1]), "exp_avg"),
        (lambda s: s["exp_avg_sq"].__setitem__(0, torch.zeros(2)), "exp_avg_sq"),
    ],
    ids=["negative-steps", "missing-tensor", "wrong-shape"],
)
def test_a_state_of_another_model_is_refused(change, field: str) -> None:
    optimizer = Adam(model().parameters(), 0.01)
    state = optimizer.state_dict()
    change(state)
    with pytest.raises(InputError) as info:
        Adam(model().parameters(), 0.01).load_state_dict(state)
    assert info.value.field == field


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_training_and_checkpointing_a_workload_leaves_dynamo_unloaded(name: str) -> None:
    # In a fresh interpreter, as a runner is: build, train, save and resume.
    script = textwrap.dedent(
        f"""
        import io, sys, torch
        from qosched.workloads import get_workload
        workload = get_workload({name!r})
        state = workload.build(1, batch_size=4)
        workload.step(state)
        buffer = io.BytesIO()
        torch.save(state.state_dict(), buffer)
        buffer.seek(0)
        workload.build(1, batch_size=4).load_state_dict(torch.load(buffer, weights_only=True))
        print("torch._dynamo" in sys.modules)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
