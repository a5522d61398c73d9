"""The runnable program cut at plan units: equal to the model bit for bit, a true chain."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from qosched.core.errors import InputError
from qosched.placement.ir import segments
from qosched.placement.program import (
    UnitProgram,
    build_model,
    export_program,
    load_program,
    model_units,
    save_program,
)
from qosched.placement.runtime import pack, unpack


@pytest.mark.process
@pytest.mark.slow
def test_a_hugging_face_model_is_saved_with_flat_outputs_that_load_in_a_fresh_process(tmp_path):
    # A plan's program is loaded in the processes that run it, where transformers was never
    # imported: torch.export cannot rebuild a ModelOutput there ("not registered"), so those
    # processes could not start. Flat outputs, in the structure's leaf order, load anywhere.
    from torch.utils import _pytree as pytree
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(
        vocab_size=16, n_embd=8, n_layer=1, n_head=2, n_positions=8, use_cache=False
    )
    model, ids = GPT2Model(config).eval(), torch.zeros(1, 8, dtype=torch.long)
    path = tmp_path / "program.pt2"
    path.write_bytes(save_program(export_program(model, (ids,))))
    script = (
        "import sys, torch\n"
        "program = torch.export.load(sys.argv[1])\n"
        "(out,) = program.module()(torch.zeros(1, 8, dtype=torch.long))\n"
        "torch.save(out, sys.argv[2])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path), str(tmp_path / "out.pt")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with torch.no_grad():
        (want,) = pytree.tree_leaves(model(ids))
    assert torch.allclose(torch.load(tmp_path / "out.pt"), want)


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec", ["mlp", "bert", "placement_helpers:residual", "placement_helpers:encoder_decoder"]
)
def test_units_run_in_order_equal_the_model_bit_for_bit(spec):
    model, inputs = build_model(spec, seed=3)
    units = model_units(model, inputs, "t")
    program = UnitProgram(load_program(save_program(export_program(model, inputs))), units, "t")
    with torch.no_grad():
        expected = model(*inputs)
    (out,) = program.run(inputs)
    assert torch.equal(out, expected)
    # piecewise: run each unit alone on only what crossed the cut before it
    env = program.start_env(inputs)
    for k in range(program.n_units):
        env = program.run_units(env, k, k + 1)
        env = {v: env[v] for v in program.live_after(k)}
    assert torch.equal(program.outputs(env)[0], expected)


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec", ["bert", "placement_helpers:residual", "placement_helpers:encoder_decoder"]
)
def test_a_unit_run_keeps_only_what_is_read_later(spec):
    # Values are dropped after their last read, so the environment after unit k holds what
    # crosses the cut after k and nothing else (values never read excepted: there are none here).
    model, inputs = build_model(spec, seed=3)
    program = UnitProgram(export_program(model, inputs), model_units(model, inputs, "t"), "t")
    env = program.start_env(inputs)
    for k in range(program.n_units):
        env = program.run_units(env, k, k + 1)
        assert set(env) == set(program.live_after(k))


@pytest.mark.slow
def test_the_mlp_is_a_chain_of_three_units_with_one_tensor_per_cut():
    model, inputs = build_model("mlp")
    program = UnitProgram(export_program(model, inputs), model_units(model, inputs, "m"), "m")
    # Linear+ReLU, Linear+ReLU, Linear: one activation crosses each cut, the output the last
    assert program.n_units == 3
    assert [len(program.live_after(k)) for k in range(3)] == [1, 1, 1]
    assert program.live_after(2) == tuple(program.output_names)


@pytest.mark.slow
def test_an_encoder_decoder_is_cut_between_layers_with_two_tensors_per_cut():
    # No cut of it crosses one tensor; it is cut where two do, and each cut moves both.
    model, inputs = build_model("placement_helpers:encoder_decoder", seed=1)
    program = UnitProgram(export_program(model, inputs), model_units(model, inputs, "e"), "e")
    assert program.n_units > 2
    crossing = [len(program.live_after(k)) for k in range(program.n_units - 1)]
    assert set(crossing) == {2}


def test_the_same_seed_gives_the_same_weights_and_inputs():
    (m1, x1), (m2, x2) = build_model("mlp", seed=7), build_model("mlp", seed=7)
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters(), strict=True))
    assert torch.equal(x1[0], x2[0])
    assert not torch.equal(build_model("mlp", seed=8)[1][0], x1[0])


def test_units_of_another_model_are_refused():
    model, inputs = build_model("mlp")
    with pytest.raises(InputError, match="different model"):
        UnitProgram(export_program(model, inputs), [["no_such_node"]], "m")


def test_a_meta_model_is_refused_with_a_hint():
    with pytest.raises(InputError, match="on the CPU"):
        build_model("placement_helpers:meta_model")


@pytest.mark.parametrize(
    ("assignment", "expected"),
    [
        (("cpu",), [("cpu", 0, 1)]),
        (("cpu", "cpu", "gpu"), [("cpu", 0, 2), ("gpu", 2, 3)]),
        (("gpu", "cpu", "gpu", "gpu"), [("gpu", 0, 1), ("cpu", 1, 2), ("gpu", 2, 4)]),
    ],
    ids=["one", "one-switch", "starts-on-gpu"],
)
def test_segments_are_maximal_same_processor_runs(assignment, expected):
    assert segments(assignment) == expected


@pytest.mark.parametrize(
    "value",
    [
        torch.randn(3, 4),
        torch.arange(6).reshape(2, 3),
        torch.tensor([True, False]),
        torch.randn(2, 2).to(torch.bfloat16),
        torch.empty(0, 5),
        torch.randn(4, 3).t(),  # not contiguous: pickled whole, strides kept
    ],
    ids=["float", "long", "bool", "bfloat16", "empty", "strided"],
)
def test_values_cross_a_cut_unchanged(value):
    (back,) = unpack(pack({"v": value})).values()
    assert back.dtype == value.dtype and back.shape == value.shape
    assert back.stride() == value.stride()
    assert torch.equal(back, value)
