"""Rank side of the speculative suite: run the calls a test module asks for, each case in its
own error scope (harness.cases.run_cases), and send back plain data.

A *task* is a dict with a "kind" (below) and its fields; `rank_tasks(ctx, tasks)` runs every
task of a module in one launch and returns {name: outcome}. Models travel as specs and are
built here from the provided module: ("tiny", {kwargs of TinyLM}) or ("constant", logits).

    call               spec: module, fn, args, kwargs -> what the function returned
    raises             spec: module, fn, args, kwargs -> the name of the exception type it
                       raised ("no error" when it returned), followed by " after N forward
                       calls" when the models it was given ran forward; NotImplementedError
                       propagates. "models" / "model": specs built here that replace the
                       leading arguments
    rejection_trials   q, p, draft tokens, trials, seed -> the emitted tokens of each trial
    generate           target, draft, prompt, k, max_new_tokens, temperature, seed[, prefill
                       tokens fed to both models first] -> {"tokens", "stats", "target_calls"}
    generate_trials    the same fields and trials -> a [trials, max_new_tokens] tensor
    compile            pattern, alphabet -> the DFA as {"start", "accepting", "transitions"}
    masks              dfa (plain), states, vocab, eos_id -> [len(states), V] bool
    mask_index         dfa (plain), vocab, eos_id -> what mask_index returned
    constrained_trials model, prompt, pattern, vocab, eos_id, max_new_tokens, trials, seed ->
                       the generated token ids of each trial
"""

from __future__ import annotations

from typing import Any

MAX_CALLS = 20_000  # forward calls of one model per task: far above any correct run's
# Lines of the code under test one call into it may run (harness.budget.counted): the
# solution's largest call runs about 41 thousand, so this is far above any correct run's; and
# counted, not timed, so a loop that never ends fails its own task within seconds whatever the
# machine's load (the launch's limit would end the whole launch, and only after minutes).
MAX_LINES = 1_000_000
# compile_regex alone: the solution's largest compile here runs under a thousand lines; a
# launch compiles dozens of patterns, and a parser loop that never ends hangs every one.
MAX_COMPILE_LINES = 100_000
LOOP_HINT = ("{fn} ran {lines} lines without returning: a loop that never ends? Each pass of "
             "a parser loop must consume a character, each pass of a worklist loop take an item")


def build_model(spec: Any) -> Any:
    from assignments.speculative.lm import ConstantLM, TinyLM

    kind, arg = spec
    if kind == "tiny":
        return TinyLM(**arg, max_calls=MAX_CALLS)
    return ConstantLM(arg, max_calls=MAX_CALLS)


def build_dfa(plain: dict) -> Any:
    from assignments.speculative.automata import DFA

    return DFA(start=plain["start"], accepting=frozenset(plain["accepting"]),
               transitions=[dict(row) for row in plain["transitions"]])


def generator(seed: int) -> Any:
    import torch

    return torch.Generator().manual_seed(int(seed))


def as_list(value: Any) -> Any:
    """A returned token tensor (or list) as a list of ints; anything else as its repr."""
    import torch

    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.reshape(-1)] if value.dim() <= 1 else repr(value)[:80]
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return f"<{type(value).__name__}>"


def dfa_plain(dfa: Any) -> dict:
    """What the parent needs of a returned DFA: start, accepting states, transitions."""
    return {"start": int(dfa.start), "accepting": sorted(int(s) for s in dfa.accepting),
            "transitions": [{str(c): int(t) for c, t in row.items()}
                            for row in dfa.transitions]}


def run_task(ctx: Any, task: dict) -> Any:
    import torch

    kind = task["kind"]
    spec_mod = ctx.impl_module("speculative", "speculative")
    if kind in ("call", "raises"):
        mod = ctx.impl_module("speculative", task["module"])
        fn = getattr(mod, task["fn"])
        models = [build_model(spec) for spec in task.get("models", ())]
        if "model" in task:
            models = [build_model(task["model"])]
        args = [*models, *task["args"][len(models):]]  # model specs replace leading arguments
        if kind == "call":
            return fn(*args, **task["kwargs"])
        try:
            fn(*args, **task["kwargs"])
        except NotImplementedError:
            raise
        except Exception as exc:  # noqa: BLE001 - the parent judges the type
            forwards = sum(m.forward_calls for m in models)
            return type(exc).__name__ + (f" after {forwards} forward calls" if forwards else "")
        return "no error"
    if kind == "rejection_trials":
        gen = generator(task["seed"])
        q, p, d = task["q"], task["p"], task["tokens"]
        return [as_list(spec_mod.rejection_sample(q.clone(), p.clone(), d.clone(), gen))
                for _ in range(task["trials"])]
    if kind in ("generate", "generate_trials"):
        target, draft = build_model(task["target"]), build_model(task["draft"])
        gen = generator(task["seed"])
        prompt = torch.tensor(task["prompt"], dtype=torch.long)
        if task.get("prefill"):  # caches that hold another sequence when the call starts
            target.forward(torch.tensor(task["prefill"]))
            draft.forward(torch.tensor(task["prefill"]))

        def once() -> tuple[Any, Any]:
            return spec_mod.speculative_generate(target, draft, prompt.clone(), task["k"],
                                                 task["max_new_tokens"], task["temperature"],
                                                 gen)

        if kind == "generate":
            before = target.forward_calls
            tokens, stats = once()
            return {"tokens": as_list(tokens), "stats": dict(stats),
                    "target_calls": target.forward_calls - before}
        rows = [as_list(once()[0]) for _ in range(task["trials"])]
        return rows
    con_mod = ctx.impl_module("speculative", "constrained")
    if kind == "compile":
        return dfa_plain(con_mod.compile_regex(task["pattern"], task["alphabet"]))
    if kind == "masks":
        dfa = build_dfa(task["dfa"])
        return torch.stack([con_mod.token_mask(dfa, s, list(task["vocab"]), task["eos_id"])
                            .to(torch.bool).reshape(-1) for s in task["states"]])
    if kind == "mask_index":
        return con_mod.mask_index(build_dfa(task["dfa"]), list(task["vocab"]), task["eos_id"])
    if kind == "constrained_trials":
        model, gen = build_model(task["model"]), generator(task["seed"])
        prompt = torch.tensor(task["prompt"], dtype=torch.long)
        return [as_list(con_mod.constrained_generate(model, prompt.clone(), task["pattern"],
                                                     list(task["vocab"]), task["eos_id"],
                                                     task["max_new_tokens"], gen))
                for _ in range(task["trials"])]
    raise ValueError(f"unknown task kind {kind!r}")


def rank_tasks(ctx: Any, tasks: dict[str, dict]) -> dict[str, dict]:
    """Every task of `tasks`, each in its own error scope, each call into the code under test
    within MAX_LINES lines (MAX_COMPILE_LINES for compile_regex); {name: outcome}."""
    from harness.budget import counted
    from harness.cases import run_cases

    def budget(task: dict) -> int:
        compiles = task["kind"] == "compile" or task.get("fn") == "compile_regex"
        return MAX_COMPILE_LINES if compiles else MAX_LINES

    return run_cases(ctx, [(name, lambda task=task: counted(lambda: run_task(ctx, task),
                                                            budget(task), LOOP_HINT))
                           for name, task in tasks.items()])
