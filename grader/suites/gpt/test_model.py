"""GPT (12 points): parameter names and shapes, the tied head, forward logits and loss against
a float64 reference rebuilt from the same weights (float64 and float32), causality of the
logits, the sequence-length check, and the initialisation's statistics."""

from __future__ import annotations

import math

import pytest
import torch

from grader.seeds import seeded_generator
from grader.suites.gpt._cases import (
    F32,
    F64,
    config_dict,
    gpt_probe,
    make_state,
    register,
    shared_probes,
)
from grader.suites.gpt._ref import gpt_tolerance, ref_logits, ref_loss
from grader.suites.gpt._ref_checks import close, result, said

CONFIG = config_dict()
STATE = make_state(CONFIG, 601)
GEN = seeded_generator(602)
IDX = torch.randint(0, CONFIG["vocab_size"], (2, 11), generator=GEN)
TARGETS = torch.randint(0, CONFIG["vocab_size"], (2, 11), generator=GEN)
TARGETS[0, 3:6] = -1
FULL = torch.randint(0, CONFIG["vocab_size"], (1, CONFIG["max_seq_len"]), generator=GEN)
CHANGED = IDX.clone()
CUT = 5  # tokens after this position differ in CHANGED
CHANGED[:, CUT + 1:] = (IDX[:, CUT + 1:] + 7) % CONFIG["vocab_size"]
# init statistics: large enough matrices that the sample std is within ~1% of the true one
INIT = config_dict(vocab_size=512, dim=128, n_layers=4, n_heads=4, n_kv_heads=2, ffn_dim=256,
                   max_seq_len=32)
INIT_SEED = 603
STD_SLACK = 0.1  # relative: the sample std of >= 16k draws is within 10% with certainty

FORWARD_HINT = said(hint=("embedding -> n_layers x (x + attn(attn_norm(x)), h + "
                          "mlp(mlp_norm(h))) -> norm -> tied head, RoPE on q and k "
                          "(README §6)"))


def build() -> dict[str, dict]:
    inputs = {"plain": (IDX, None), "targets": (IDX, TARGETS), "changed": (CHANGED, None),
              "full": (FULL, None)}
    return {
        "structure": gpt_probe("gpt_structure", CONFIG, None, dtype=None),
        "f64": gpt_probe("gpt_forward", CONFIG, STATE, inputs=inputs),
        "f32": gpt_probe("gpt_forward", CONFIG, STATE, dtype=F32,
                         inputs={"plain": (IDX, None)}),
        "init": gpt_probe("gpt_structure", INIT, None, dtype=None, seed=INIT_SEED),
        "reinit": gpt_probe("gpt_structure", INIT, None, dtype=None, seed=INIT_SEED + 1,
                            reinit=True),
        "errors": gpt_probe("gpt_error", CONFIG, None, dtype=None, calls={
            "long": {"what": "forward",
                     "idx": torch.zeros(1, CONFIG["max_seq_len"] + 1, dtype=torch.long)}}),
    }


TAG = register("model", build())


@pytest.fixture(scope="module")
def probes(launch, impl):
    return shared_probes(launch, impl, TAG)


@pytest.mark.points(2)
@pytest.mark.exercises("GPT")
def test_parameter_names_and_tied_head(probes):
    got = result(probes, "structure", "GPT(config).state_dict()")
    want = {k: list(v.shape) for k, v in STATE.items()}
    missing = sorted(set(want) - set(got["state"]))
    extra = sorted(set(got["state"]) - set(want))
    assert not missing and not extra, (
        f"GPT.state_dict() names differ from the documented ones: missing {missing[:4]}, "
        f"unexpected {extra[:4]} (GPT's docstring; RoPE tables are non-persistent buffers)")
    wrong = [k for k in want if got["state"][k] != want[k]]
    assert not wrong, (f"GPT parameter {wrong[0]} has shape {got['state'][wrong[0]]}, expected "
                       f"{want[wrong[0]]}")
    assert got["tied_same"] and got["tied_storage"], (
        "lm_head.weight is not tied to tok_emb.weight: assign the same nn.Parameter "
        "(self.lm_head.weight = self.tok_emb.weight), README §6")


@pytest.mark.points(3)
@pytest.mark.exercises("GPT")
def test_forward_logits_and_loss_float64(probes):
    got = result(probes, "f64", "GPT forward (float64)")
    expected = ref_logits(STATE, CONFIG, IDX)
    close(got["plain"]["logits"], expected, "GPT logits [2, 11, 37] (float64)", dtype=F64,
          hint=FORWARD_HINT)
    assert got["plain"]["loss"] is None, "GPT(idx) without targets must return loss None"
    close(got["full"]["logits"], ref_logits(STATE, CONFIG, FULL),
          f"GPT logits of exactly max_seq_len = {CONFIG['max_seq_len']} tokens (float64)",
          dtype=F64, hint="max_seq_len tokens are allowed; only longer sequences raise")
    close(got["targets"]["loss"], ref_loss(expected, TARGETS),
          "GPT loss with targets (three of them -1)", dtype=F64,
          hint="mean cross-entropy over the targets that are not -1 (ignore_index=-1)")


@pytest.mark.points(2)
@pytest.mark.exercises("GPT")
def test_forward_float32(probes):
    got = result(probes, "f32", "GPT forward (float32)")
    state32 = {k: v.to(F32).to(F64) for k, v in STATE.items()}
    expected = ref_logits(state32, CONFIG, IDX)
    tol = gpt_tolerance(CONFIG, IDX.shape[1], magnitude=float(expected.abs().max()) * 4)
    close(got["plain"]["logits"], expected, "GPT logits (float32 model)", dtype=F32, tol=tol,
          hint=FORWARD_HINT)


@pytest.mark.points(2)
@pytest.mark.exercises("GPT")
def test_logits_ignore_later_tokens(probes):
    got = result(probes, "f64", "GPT forward (float64)")
    before, after = got["plain"]["logits"], got["changed"]["logits"]
    close(after[:, :CUT + 1], before[:, :CUT + 1].to(F64),
          f"GPT logits at positions 0..{CUT} after the tokens after {CUT} changed", dtype=F64,
          hint="position t may depend only on tokens 0..t: use causal attention (README §6)")


@pytest.mark.points(1)
@pytest.mark.exercises("GPT")
def test_forward_rejects_too_long_sequences(probes):
    got = result(probes, "errors", "GPT forward of max_seq_len + 1 tokens")
    assert got["long"] == "ValueError", (
        f"GPT(idx) with {CONFIG['max_seq_len'] + 1} tokens (max_seq_len "
        f"{CONFIG['max_seq_len']}) should raise ValueError, got {got['long']}")


@pytest.mark.points(2)
@pytest.mark.exercises("GPT")
def test_init_statistics(probes):
    check_init(result(probes, "init", "GPT(config) at initialisation")["stats"], "")
    check_init(result(probes, "reinit", "GPT.init_weights()")["stats"],
               " after init_weights() on spoiled parameters (it re-initialises every one)")


def check_init(stats: dict, when: str) -> None:
    residual = 0.02 / math.sqrt(2 * INIT["n_layers"])
    for name, s in stats.items():
        if name.endswith("norm.weight"):
            assert s["ones"], f"{name} is not all ones at initialisation{when} (README §6)"
            continue
        want = residual if name.endswith(("attn.wo.weight", "mlp.down.weight")) else 0.02
        ok = abs(s["std"] - want) <= STD_SLACK * want and abs(s["mean"]) <= 0.1 * want
        if not ok and name.endswith(("attn.wo.weight", "mlp.down.weight")):
            raise AssertionError(
                f"{name} has std {s['std']:.4g} at initialisation{when}, expected "
                f"0.02 / sqrt(2 * n_layers) = {want:.4g}: scale the residual output "
                f"projections by 1/sqrt(2 * n_layers) (README §6)")
        assert ok, (f"{name} has mean {s['mean']:.3g} and std {s['std']:.4g} at "
                    f"initialisation{when}, expected normal(0, {want:.4g}) (README §6)")
