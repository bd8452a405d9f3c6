"""GPT.generate (8 points): with the KV cache, greedy and seeded top-k sampling give exactly the
tokens of full recomputation (the reference recomputes every step in float64); use_cache=False
gives them too; the training mode is restored; too long a request raises ValueError."""

from __future__ import annotations

import pytest
import torch

from grader.seeds import seeded_generator, shifted
from grader.suites.gpt._cases import config_dict, gpt_probe, make_state, register, shared_probes
from grader.suites.gpt._ref import ref_generate
from grader.suites.gpt._ref_checks import result, said

CONFIG = config_dict(max_seq_len=24)
STATE = make_state(CONFIG, 701)
PROMPT = torch.randint(0, CONFIG["vocab_size"], (2, 5), generator=seeded_generator(702))
NEW = 14
SAMPLE_SEED = shifted(703)
CALLS = {
    "greedy": dict(idx=PROMPT, max_new_tokens=NEW, temperature=0.0, use_cache=True),
    "greedy_nocache": dict(idx=PROMPT, max_new_tokens=NEW, temperature=0.0, use_cache=False),
    "sample": dict(idx=PROMPT, max_new_tokens=NEW, temperature=0.8, top_k=6,
                   generator_seed=SAMPLE_SEED, use_cache=True),
    "sample_nocache": dict(idx=PROMPT, max_new_tokens=NEW, temperature=0.8, top_k=6,
                           generator_seed=SAMPLE_SEED, use_cache=False),
    "one_token_prompt": dict(idx=PROMPT[:, :1], max_new_tokens=6, temperature=1.3,
                             generator_seed=SAMPLE_SEED + 1, use_cache=True),
    "training": dict(idx=PROMPT, max_new_tokens=2, temperature=0.0, use_cache=True,
                     training=True),
    "top3_hot": dict(idx=PROMPT, max_new_tokens=NEW, temperature=3.0, top_k=3,
                     generator_seed=SAMPLE_SEED + 2, use_cache=True),
    "defaults": dict(idx=PROMPT, max_new_tokens=NEW, generator_seed=SAMPLE_SEED + 3),
    "exact_fill": dict(idx=PROMPT, max_new_tokens=CONFIG["max_seq_len"] - PROMPT.shape[1],
                       temperature=0.0, use_cache=True),
}
CACHE_HINT = said(hint=("the KV cache path differs from recomputing the whole sequence: feed "
                        "only the new token, at its true position (the number of tokens "
                        "already cached), with RoPE applied before caching K (README §7)"))

SAME_AS_OWN_HINT = said(hint=("the KV cache agrees with your own recomputation, so the tokens "
                              "differ before the cache: check the forward's logits (the GPT "
                              "tests) and the sampling steps (README §7)"))


def cache_hint(got: dict, cached: str, recomputed: str, sampling: str = "") -> str:
    """The KV-cache hint only when the evidence holds: the implementation's cached tokens
    differ from its own recomputation (`recomputed`, the same call with use_cache=False)."""
    mine, again = (got[key].get("tokens") if isinstance(got.get(key), dict) else None
                   for key in (cached, recomputed))
    if isinstance(mine, torch.Tensor) and isinstance(again, torch.Tensor) \
            and mine.shape == again.shape and torch.equal(mine, again):
        return sampling + SAME_AS_OWN_HINT
    return sampling + CACHE_HINT


def build() -> dict[str, dict]:
    return {
        "calls": gpt_probe("gpt_generate", CONFIG, STATE, calls=CALLS),
        "errors": gpt_probe("gpt_error", CONFIG, None, dtype=None, calls={
            "long": {"what": "generate", "idx": PROMPT, "max_new_tokens": 20}}),
    }


TAG = register("generate", build())


@pytest.fixture(scope="module")
def probes(launch, impl):
    return shared_probes(launch, impl, TAG)


def expected(name: str) -> torch.Tensor:
    call = CALLS[name]
    return ref_generate(STATE, CONFIG, call["idx"], call["max_new_tokens"],
                        call.get("temperature", 1.0), call.get("top_k"),
                        call.get("generator_seed"))


def check(got: dict, name: str, what: str, hint: str) -> None:
    tokens = got[name]["tokens"]
    want = expected(name)
    if not isinstance(tokens, torch.Tensor) or tokens.shape != want.shape:
        raise AssertionError(f"{what}: expected a token tensor of shape {list(want.shape)}, "
                             f"got {getattr(tokens, 'shape', type(tokens).__name__)}")
    differs = (tokens != want).any(0).nonzero()
    if len(differs):
        first = int(differs[0])
        start = CALLS[name]["idx"].shape[1]
        raise AssertionError(
            f"{what}: {hint} — first differs at new token {first - start + 1} (position "
            f"{first}): got {tokens[:, first].tolist()}, expected {want[:, first].tolist()}")


@pytest.mark.points(3)
@pytest.mark.exercises("GPT")
def test_greedy_with_cache_equals_recomputation(probes):
    got = result(probes, "calls", "GPT.generate")
    check(got, "greedy", "greedy generate with the KV cache",
          cache_hint(got, "greedy", "greedy_nocache"))
    check(got, "exact_fill", "greedy generate up to exactly max_seq_len tokens",
          "prompt + max_new_tokens == max_seq_len is allowed: the last token is placed at "
          "position max_seq_len - 1 (README §7)")


@pytest.mark.points(3)
@pytest.mark.exercises("GPT")
def test_seeded_top_k_sampling_with_cache_equals_recomputation(probes):
    got = result(probes, "calls", "GPT.generate")
    hint = said(hint=("sample as documented: logits / temperature, top_k filter, softmax, one "
                      "torch.multinomial(probs, 1, generator=generator) per step; and "))
    check(got, "sample", "top-k sampling (temperature 0.8, top_k 6) with the KV cache",
          cache_hint(got, "sample", "sample_nocache", hint))
    check(got, "one_token_prompt", "sampling from a one-token prompt with the KV cache",
          hint + CACHE_HINT)
    check(got, "top3_hot", "top-k sampling (temperature 3.0, top_k 3)",
          "keep the top_k largest logits (ties at the k-th kept), set only those below it "
          "to -inf (README §7)")
    check(got, "defaults", "generate(idx, n, generator=g) with the defaults",
          "the defaults are temperature 1.0, no top_k, use_cache=True (README §7)")


@pytest.mark.points(2)
@pytest.mark.exercises("GPT")
def test_without_cache_mode_and_errors(probes):
    got = result(probes, "calls", "GPT.generate")
    check(got, "greedy_nocache", "greedy generate(use_cache=False)",
          "recompute forward() over the whole sequence each step (README §7)")
    check(got, "sample_nocache", "top-k sampling with use_cache=False",
          "logits / temperature, top_k filter, softmax, one multinomial per step (README §7)")
    assert got["training"]["training_after"] is True, (
        "generate() left a model in training mode in eval mode: restore the mode it had")
    errors = result(probes, "errors", "GPT.generate beyond max_seq_len")
    assert errors["long"] == "ValueError", (
        f"generate of 5 + 20 tokens with max_seq_len 24 should raise ValueError, got "
        f"{errors['long']}")
