import pytest
import torch
from torch import nn

from qosched.core.errors import InputError
from qosched.graph import ZOO, capture, load_model
from qosched.graph.zoo import BasicBlock

# The zoo's capture, shared by its tests, takes tens of seconds.
pytestmark = pytest.mark.slow


def _compute_ops(graph, target):
    return [op for op in graph.operators if op.target == target]


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_captures(zoo_graphs, name):
    g = zoo_graphs[name]
    assert len(g) > 0
    assert g.total_flops > 0
    assert g.total_param_bytes > 0
    assert g.outputs


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_parameters_stay_on_meta(zoo_models, zoo_graphs, name):
    model, _ = zoo_models[name]  # the model zoo_graphs captured
    assert all(p.device.type == "meta" for p in model.parameters())


def test_linear_flops_params_and_bytes():
    with torch.device("meta"):
        model, x = nn.Linear(64, 32), torch.empty(8, 64)
    g = capture(model, (x,), name="linear")
    (addmm,) = _compute_ops(g, "aten.addmm.default")
    # flop_counter counts addmm as the matmul alone: 2 * M * K * N, bias add not counted
    assert addmm.flops == 2 * 8 * 64 * 32
    assert g.total_flops == 2 * 8 * 64 * 32  # the weight permute is free
    assert g.total_param_bytes == (64 * 32 + 32) * 4
    assert addmm.bytes_written == 8 * 32 * 4
    assert addmm.output_meta[0].shape == (8, 32)
    assert addmm.output_meta[0].dtype == "float32"
    assert addmm.module == ""  # the root module itself


def test_conv_flops_and_bytes_by_hand():
    with torch.device("meta"):
        model, x = nn.Conv2d(3, 16, 3, stride=2), torch.empty(2, 3, 9, 9)
    g = capture(model, (x,), name="conv")
    (conv,) = _compute_ops(g, "aten.convolution.default")
    h_out = (9 - 3) // 2 + 1  # 4
    assert conv.flops == 2 * 16 * h_out * h_out * 3 * 3 * 3 * 2
    assert conv.flops == 27648
    assert conv.bytes_read == (2 * 3 * 9 * 9 + 16 * 3 * 3 * 3 + 16) * 4
    assert conv.bytes_written == 2 * 16 * 4 * 4 * 4
    assert conv.param_bytes == (16 * 3 * 3 * 3 + 16) * 4


class _Experts(nn.Module):
    """A mixture of experts' matmul: 4 experts, each (32 -> 48), tokens sorted by expert."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(4, 32, 48, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return torch._grouped_mm(x, self.weight, offs=offsets)


def test_grouped_matmul_of_experts_counts_each_token_through_its_expert():
    with torch.device("meta"):
        model, x = _Experts(), torch.empty(20, 32, dtype=torch.bfloat16)
        offsets = torch.empty(4, dtype=torch.int32)
    (grouped,) = _compute_ops(capture(model, (x, offsets)), "aten._grouped_mm.default")
    assert grouped.kind == "compute"
    assert grouped.flops == 2 * 20 * 32 * 48  # 20 tokens, each one 32-by-48 matmul


class _Spectral(nn.Module):
    """FNet's token mixing (a 2-D FFT over sequence and hidden, real part kept) and a real
    round trip along the last dimension."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mixed = torch.fft.fftn(x.to(torch.complex64), dim=(-2, -1)).real
        return mixed + torch.fft.irfft(torch.fft.rfft(x, dim=-1), n=x.shape[-1], dim=-1)


def test_ffts_count_five_n_log2_n_per_complex_transform_and_half_for_real_data():
    with torch.device("meta"):
        model, x = _Spectral(), torch.empty(2, 16, 32)
    g = capture(model, (x,))
    (c2c,) = _compute_ops(g, "aten._fft_c2c.default")
    (r2c,) = _compute_ops(g, "aten._fft_r2c.default")
    (c2r,) = _compute_ops(g, "aten._fft_c2r.default")
    # Two transforms of 16 x 32 = 512 points: 5 * 512 * log2(512) = 23,040 each.
    assert c2c.kind == "compute" and c2c.flops == 2 * 5 * 512 * 9
    # 2 x 16 = 32 transforms of 32 real points: 2.5 * 32 * log2(32) = 400 each, either way.
    assert r2c.flops == c2r.flops == 32 * 400


def test_elementwise_counts_one_flop_per_output_element():
    with torch.device("meta"):
        model, x = nn.ReLU(), torch.empty(8, 64)
    (relu,) = capture(model, (x,)).operators
    assert (relu.kind, relu.flops, relu.bytes_read, relu.bytes_written) == (
        "elementwise",
        512,
        2048,
        2048,
    )


def test_real_cpu_model_captures_like_meta():
    torch.manual_seed(0)
    model = nn.Linear(64, 32)
    g = capture(model, (torch.randn(8, 64),), name="cpu-linear")
    assert g.total_flops == 2 * 8 * 64 * 32
    assert model.training  # training flag restored


def test_operator_records_module_path_and_dependencies():
    with torch.device("meta"):
        model, x = nn.Sequential(BasicBlock(8, 8)), torch.empty(1, 8, 4, 4)
    g = capture(model, (x,), name="block")
    add = next(op for op in g.operators if op.target == "aten.add.Tensor")
    assert add.module == "0"
    assert "x" in add.inputs or "input" in add.inputs  # the identity shortcut reads the input
    assert g.successors(add.name) == g.outputs or len(g.successors(add.name)) == 1


def test_bert_input_is_int64(zoo_graphs):
    (ids,) = zoo_graphs["bert"].inputs
    assert (ids.meta.shape, ids.meta.dtype, ids.meta.bytes) == ((2, 128), "int64", 2 * 128 * 8)


class DataDependent(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x


def test_uncapturable_model_raises_input_error_naming_it():
    with pytest.raises(InputError, match=r"'branchy'.*follows the values in a tensor") as info:
        capture(DataDependent(), (torch.empty(3, device="meta"),), name="branchy")
    assert info.value.__cause__ is not None


def test_a_model_that_says_why_it_cannot_be_captured_fails_with_its_reason():
    model = DataDependent()
    model.capture_problem = "its branch follows the sum of x"
    reason = r"could not capture it: its branch follows the sum of x \(it stopped at Guard"
    with pytest.raises(InputError, match=reason):
        capture(model, (torch.empty(3, device="meta"),), name="branchy")


def test_load_model_by_import_path(monkeypatch):
    model, inputs = load_model("qosched.graph.zoo:mlp", batch=4)
    assert inputs[0].shape == (4, 784)
    model, inputs = load_model("model_factories:tiny")
    assert capture(model, inputs).total_flops == 2 * 3 * 4 * 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no-such-model", "unknown model"),
        ("qosched_no_such_module_xyz:f", "cannot import module"),
        ("qosched.graph.zoo:nope", "has no attribute 'nope'"),
        ("model_factories:not_callable", "is not callable"),
        ("model_factories:wrong_shape", r"must return \(nn.Module, tuple"),
        (":f", "expected 'package.module:factory'"),
        ("model_factories:raises", "its factory raised RuntimeError: no weights here$"),
        (
            "model_factories_broken:f",
            "cannot import module 'model_factories_broken': RuntimeError: this module fails",
        ),
        ("math:sqrt", r"its factory raised TypeError: math.sqrt\(\) takes exactly one argument"),
        ("hf:", "expected 'hf:<model_type>'"),
        ("os.:f", "expected 'package.module:factory'"),
        ("m" * 100_000, "unknown model 'mmmm"),
    ],
    ids=[
        "unknown-name",
        "missing-module",
        "missing-attribute",
        "not-callable",
        "wrong-return",
        "empty-module",
        "factory-raises",
        "module-raises-on-import",
        "not-a-factory",
        "hf-without-type",
        "empty-submodule",
        "name-of-100000-characters",
    ],
)
def test_load_model_bad_specs(spec, message):
    # A user's factory or module failing is their input's error, in one line, not a traceback.
    with pytest.raises(InputError, match=message) as caught:
        load_model(spec)
    assert "\n" not in str(caught.value)
    assert len(str(caught.value)) < 400
