"""MoELayer's construction: a fresh layer's shapes, dtype, defaults and initialisation range,
and from_dense's copies (README §6; the class docstring)."""

from __future__ import annotations

import math

import pytest
import torch

from grader.suites.moe._cases import cases_for, run, values

pytestmark = pytest.mark.exercises("MoELayer")
WORLD = 2


def _fresh(launch, impl):
    return values(run(launch, impl, WORLD), "layer fresh")[0], cases_for(WORLD)["layer fresh"]


@pytest.mark.points(1)
def test_fresh_layer(launch, impl):
    got, case = _fresh(launch, impl)
    h, f, e = case["hidden"], case["ffn"], case["experts"]
    local = e // WORLD
    fresh = got["fresh"]
    assert fresh["k"] == 2 and fresh["capacity_factor"] is None, (
        f"MoELayer(hidden, ffn, num_experts): the defaults are k=2 and capacity_factor=None; "
        f"got k={fresh['k']}, capacity_factor={fresh['capacity_factor']}")
    shapes = {"router": [e, h], "w_gate": [local, f, h], "w_up": [local, f, h],
              "w_down": [local, h, f]}
    assert fresh["shapes"] == shapes, (
        f"MoELayer({h}, {f}, {e}) on {WORLD} ranks: parameter shapes {fresh['shapes']}, "
        f"expected {shapes} (router [E, H], this rank's E/N experts)")
    for name, dtype in fresh["dtypes"].items():
        assert dtype == "torch.float32", f"MoELayer: {name} is {dtype}, expected float32"
    for name, fan_in in (("router", h), ("w_gate", h), ("w_up", h), ("w_down", f)):
        bound = 1 / math.sqrt(fan_in)
        got_max = fresh["max_abs"][name]
        assert 0.9 * bound <= got_max <= bound, (
            f"MoELayer: {name} initialised with max |w| = {got_max:.4g}; expected U(-b, b) "
            f"with b = 1/sqrt(fan_in) = {bound:.4g} (fan_in {fan_in})")


@pytest.mark.points(1)
def test_from_dense_copies(launch, impl):
    got, case = _fresh(launch, impl)
    assert got["from_dense_k"] == 2, (
        f"MoELayer.from_dense without k: the default is k=2, got {got['from_dense_k']}")
    local = case["experts"] // WORLD
    for name, dense in case["dense"].items():
        want = dense if name == "router" else dense[:local]
        assert torch.equal(got["after"][name], want), (
            f"[rank 0 of {WORLD}] MoELayer.from_dense: never keep views of the dense weights, "
            f"copy them (.clone()): {name} changed when the caller overwrote its dense tensor")
