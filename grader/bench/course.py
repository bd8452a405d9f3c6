"""The steps of `make test`, each with its wall and CPU seconds, and each assignment's share.

The steps are read from the Makefile's `test` recipe (its `lint` prerequisite first), so the
table cannot drift from what CI runs; each runs as it does there, one after another. CPU is
the user + system seconds of every process the step started and waited for; "machine CPU" is
what `/proc/stat` counted on every core meanwhile (ranks and sidecars are reparented away from
the step's tree, so only this sees them all: on an idle machine it is the step's real cost, and
"busy" is its share of the cores). The selfcheck's
table gives each assignment's session seconds, so a new assignment's cost is visible before it
lands. Compare the total with the budget in docs/design.md; never asserts on time.

    python -m grader bench course [--only STEP ...] [--budget 600]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from grader.manifest import REPO_ROOT
from grader.report.render import format_table

BUDGET_S = 600.0  # docs/design.md: make test for about 20 assignments, install included
_SELFCHECK_ROW = re.compile(r"^(?P<id>[a-z0-9_]+)\s+[✓✗-].*?(?P<seconds>[0-9.]+) s$")


@dataclass
class StepTime:
    """One step of `make test` and what it cost (`machine_cpu_s` None without /proc/stat)."""

    command: str
    wall_s: float
    cpu_s: float
    returncode: int
    output: str
    machine_cpu_s: float | None = None

    @property
    def busy(self) -> str:
        """The machine's CPU over what its cores could have given, as a percentage."""
        cores = os.cpu_count() or 1
        if self.machine_cpu_s is None or self.wall_s <= 0:
            return "-"
        return f"{self.machine_cpu_s / (self.wall_s * cores):.0%}"


def machine_cpu_s() -> float | None:
    """CPU seconds the whole machine has spent so far, every core (None without /proc/stat)."""
    try:
        fields = Path("/proc/stat").read_text(encoding="utf-8").splitlines()[0].split()
        ticks = [int(x) for x in fields[1:9]]
    except (OSError, IndexError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def make_test_steps(makefile: Path) -> list[str]:
    """The shell commands of `make test` in order: the `lint` recipe, then `test`'s own (with
    `$(PY)` as this interpreter; comment lines dropped)."""
    text = makefile.read_text(encoding="utf-8")
    recipes: dict[str, list[str]] = {}
    target = None
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z][\w-]*):", line)
        if match:
            target = match.group(1)
            recipes.setdefault(target, [])
        elif line.startswith("\t") and target is not None:
            command = line.strip()
            if command and not command.startswith("@#"):
                recipes[target].append(command.lstrip("@"))
        elif line and not line.startswith("#"):
            target = None
    steps = recipes.get("lint", []) + recipes.get("test", [])
    return [step.replace("$(PY)", sys.executable) for step in steps]


def run_step(command: str, cwd: Path) -> StepTime:
    """Run one step with the shell, as make does; wall and CPU seconds of its whole tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    machine_before = machine_cpu_s()
    start = time.perf_counter()
    proc = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    machine_after = machine_cpu_s()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    machine = (None if machine_before is None or machine_after is None
               else machine_after - machine_before)
    return StepTime(command, wall, cpu, proc.returncode, proc.stdout + proc.stderr, machine)


def selfcheck_shares(output: str) -> dict[str, float]:
    """Each assignment's session seconds from the selfcheck's table (its last column)."""
    shares = {}
    for line in output.splitlines():
        match = _SELFCHECK_ROW.match(line.strip())
        if match and match.group("id") != "assignment":
            shares[match.group("id")] = float(match.group("seconds"))
    return shares


def short(command: str) -> str:
    """The step as a person reads it: the interpreter path dropped."""
    return command.replace(sys.executable, "python")[:70]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench course",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], metavar="WORD",
                        help="run only the steps whose command contains one of these words")
    parser.add_argument("--budget", type=float, default=BUDGET_S,
                        help=f"seconds the whole of make test may take (default {BUDGET_S:g})")
    args = parser.parse_args(argv)
    steps = [s for s in make_test_steps(REPO_ROOT / "Makefile")
             if not args.only or any(word in s for word in args.only)]
    if not steps:
        print("error: no step of make test matches --only", file=sys.stderr)
        return 2
    timed = []
    for number, command in enumerate(steps, 1):
        print(f"[{number}/{len(steps)}] {short(command)} ...", flush=True)
        timed.append(run_step(command, REPO_ROOT))
        print(f"      {timed[-1].wall_s:.1f} s wall, {timed[-1].cpu_s:.1f} s CPU, "
              f"machine busy {timed[-1].busy}, exit {timed[-1].returncode}", flush=True)
    total = sum(t.wall_s for t in timed)
    print()
    print(format_table(["step", "wall s", "CPU s", "machine CPU s", "busy", "share", "exit"],
                       [[short(t.command), f"{t.wall_s:.1f}", f"{t.cpu_s:.1f}",
                         "-" if t.machine_cpu_s is None else f"{t.machine_cpu_s:.1f}", t.busy,
                         f"{t.wall_s / total:.0%}" if total else "-", t.returncode]
                        for t in timed]))
    print(f"total {total:.0f} s of a {args.budget:.0f} s budget ({total / args.budget:.0%}); "
          "the environment's install comes on top on a fresh machine")
    shares = {}
    for t in timed:
        if "grader selfcheck" in t.command:
            shares = selfcheck_shares(t.output)
    if shares:
        spent = sum(shares.values())
        print("\nselfcheck, each assignment's session seconds (sessions run side by side):")
        print(format_table(["assignment", "session s", "share"],
                           [[aid, f"{s:.1f}", f"{s / spent:.0%}"] for aid, s in
                            sorted(shares.items(), key=lambda item: -item[1])]))
    return 0 if all(t.returncode == 0 for t in timed) else 1
