"""Every registered sharing policy drives the PyTorch runtime (CPU device) unchanged, as it
drives the simulator: same outputs as each model alone, every request answered."""

import pytest
import torch

from qosched.gpushare.policies import create_policy, policy_names
from qosched.gpushare.runtime import App, run_apps
from qosched.graph.zoo import mlp


def apps():
    torch.manual_seed(0)
    high, (x,) = mlp(batch=2, device="cpu")
    torch.manual_seed(1)
    low, _ = mlp(batch=8, device="cpu")
    gen = torch.Generator().manual_seed(2)
    hi_inputs = tuple((torch.randn(2, *x.shape[1:], generator=gen),) for _ in range(3))
    lo_inputs = tuple((torch.randn(8, *x.shape[1:], generator=gen),) for _ in range(3))
    return [App("serve", 1, high, hi_inputs), App("batch", 0, low, lo_inputs)]


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_runs_real_models_with_their_outputs_unchanged(name):
    workload = apps()
    with torch.no_grad():
        expected = {a.name: [a.model(*i) for i in a.inputs] for a in workload}
    result = run_apps(workload, create_policy(name))
    for app in workload:
        outputs = result.app(app.name).outputs
        assert len(outputs) == len(expected[app.name])
        for got, want in zip(outputs, expected[app.name], strict=True):
            assert torch.equal(got, want), (name, app.name)
