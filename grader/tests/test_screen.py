"""The static screen (grader/screen/scan.py): fair to every correct implementation, names the file,
the line and the rule of what it rejects, and gates the assignment's other tests."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from grader.instructor import adversarial
from grader.manifest import ManifestError, load_manifest, parse_manifest
from grader.screen.scan import RULES, screen, screen_source
from grader.session.runner import run_session, suite_paths
from grader.session.screen_gate import screen_impl
from grader.tests.test_manifest import with_change
from harness.impl import REPO_ROOT, resolve_impl

COURSE = load_manifest()


def rules_of(source: str, allow: tuple[str, ...] = ()) -> set[str]:
    return {f.rule for f in screen_source(source, "ring.py", allow)}


# -- fairness -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["assignments", "solutions"])
@pytest.mark.parametrize("assignment", COURSE.ids)
def test_every_solution_and_stub_passes(kind, assignment):
    verdict = screen_impl(resolve_impl(kind), COURSE, assignment, REPO_ROOT)
    assert verdict.passed, verdict.report()
    assert verdict.screened, "screened no file"


@pytest.mark.parametrize("case", [c for c in adversarial.cases() if not c.screen],
                         ids=lambda c: c.name)
def test_honest_and_unscreened_corpus_submissions_pass(case, tmp_path):
    # the independent correct ring (case 00; grader/tests/independent/ring_allreduce/ring.py)
    # and the attacks the screen does not claim to catch: their submissions, as graded, pass
    assert adversarial.screen_problems(case, adversarial._materialise(case, tmp_path)) == []


@pytest.mark.parametrize("case", [c for c in adversarial.cases() if c.screen],
                         ids=lambda c: c.name)
def test_screened_corpus_submissions_are_rejected_with_their_rule(case, tmp_path):
    assert adversarial.screen_problems(case, adversarial._materialise(case, tmp_path)) == []


# -- rules ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("source", "rule"), [
    ("x = eval('1')", "no-dynamic-code"),
    ("exec('x = 1')", "no-dynamic-code"),
    ("c = compile('1', 'f', 'eval')", "no-dynamic-code"),
    ("m = __import__('ctypes')", "no-dynamic-code"),
    ("import importlib", "no-dynamic-code"),
    ("from importlib import import_module", "no-dynamic-code"),
    ("import marshal", "no-dynamic-code"),
    ("import ctypes", "no-native-code"),
    ("import ctypes as c", "no-native-code"),
    ("from torch.utils.cpp_extension import load_inline", "no-native-code"),
    ("import gc\ngc.get_objects()", "no-introspection"),
    ("import inspect", "no-introspection"),
    ("import sys\nf = sys._getframe(1)", "no-introspection"),
    ("from sys import _getframe", "no-introspection"),
    ("def f(e):\n    return e.__traceback__.tb_frame.f_back.f_globals", "no-introspection"),
    ("def f(g):\n    return g.gi_frame", "no-introspection"),
    ("import torch.distributed as d\ncells = d.send.__closure__", "no-introspection"),
    ("def f(fn):\n    return fn.__code__.co_filename", "no-introspection"),
    ("def f(fn):\n    return fn.__globals__", "no-introspection"),
    ("x = ().__class__.__base__.__subclasses__()", "no-introspection"),
    ("def f(fn):\n    return getattr(fn, '__closure__')", "no-introspection"),
    ("def f(o, name):\n    return getattr(o, name)", "no-computed-attribute"),
    ("def f(o, name):\n    setattr(o, name, 1)", "no-computed-attribute"),
    ("def f(o, name):\n    return object.__getattribute__(o, name)", "no-introspection"),
    ("import builtins", "no-interpreter-state"),
    ("b = __builtins__", "no-interpreter-state"),
    ("import sys\nm = sys.modules", "no-interpreter-state"),
    ("g = globals()", "no-interpreter-state"),
    ("import torch\ntorch.allclose = lambda *a: True", "no-monkeypatching"),
    ("import torch.distributed as dist\ndist.send = print", "no-monkeypatching"),
    ("import os\nos.fork()", "no-process-control"),
    ("import os\nos.setsid()", "no-process-control"),
    ("import os\nos.kill(1, 9)", "no-process-control"),
    ("import os\nos.system('x')", "no-process-control"),
    ("import os\nos.execv('x', [])", "no-process-control"),
    ("from os import fork as spoon\nspoon()", "no-process-control"),
    ("import subprocess", "no-process-control"),
    ("import multiprocessing", "no-process-control"),
    ("import signal", "no-process-control"),
    ("import socket", "no-network"),
    ("import pickle", "no-serialisation"),
    ("import cloudpickle", "no-serialisation"),
    ("import dill", "no-serialisation"),
    ("import torch\ntorch.save({}, 'x')", "no-serialisation"),
    ("class P:\n    def __reduce__(self):\n        return (print, ())", "no-serialisation"),
    ("f = open('/tmp/x', 'w')", "no-files"),
    ("import os\nos.truncate('x', 10)", "no-files"),
    ("import torch\nt = torch.from_file('x', shared=True, size=8)", "no-files"),
    ("import torch.distributed as dist\nw = dist._world", "no-course-internals"),
    ("import torch.distributed as dist\nw = getattr(dist, '_world')", "no-course-internals"),
    ("import os\npid = getattr(os, 'fork')()", "no-process-control"),
    ("import torch\ns = torch.UntypedStorage.from_file('x', True, 8)", "no-files"),
    ("def f(t):\n    return t.untyped_storage().from_file('x', True, 8)", "no-files"),
    ("import torch.distributed as dist\ns = dist.FileStore('x', 2)", "no-files"),
    ("import os\ntoken = os.environ['GITHUB_TOKEN']", "no-environment"),
    ("import os\ntoken = os.getenv('GITHUB_TOKEN')", "no-environment"),
    ("import harness.commlog", "no-course-internals"),
    ("from harness.mutation import mutate", "no-course-internals"),
    ("from grader.instructor.adversarial import ctypes", "no-course-internals"),
    ("import torch\ntorch.distributed.group.WORLD._get_backend(None)", "no-course-internals"),
    # issue 35: chains through re-exported modules, aliased builtins, functional collectives
    ("import torch\ntorch.os.fork()", "no-process-control"),
    ("import torch\nm = torch.sys.modules['grader']", "no-interpreter-state"),
    ("import numpy\no = numpy.os", "no-interpreter-state"),
    ("from numpy import os as o\no.kill(1, 9)", "no-process-control"),
    ("import torch\nm = getattr(torch, 'os')", "no-interpreter-state"),
    ("_ga = getattr\ndef f(o, n):\n    return _ga(o, n)", "no-computed-attribute"),
    ("import functools\nget = functools.partial(getattr)", "no-computed-attribute"),
    ("import torch\nr = torch.ops._c10d_functional.all_reduce", "no-course-internals"),
    ("import torch\nr = getattr(torch, 'ops')", "no-course-internals"),
    ("import torch.distributed._functional_collectives as fc", "no-course-internals"),
    ("from torch.distributed import _functional_collectives", "no-course-internals"),
    ("import torch.distributed as dist\nfc = dist._functional_collectives", "no-course-internals"),
    ("import torch.distributed as dist\ns = dist._symmetric_memory", "no-course-internals"),
    ("def f(:\n", "syntax"),
])
def test_each_rule_catches_its_construct(source, rule):
    assert rule in rules_of(source), screen_source(source, "ring.py")


@pytest.mark.parametrize("source", [
    "import torch\nimport torch.distributed as dist\nx = torch.zeros(3)\ndist.send(x, 1)",
    "import math\nfrom dataclasses import dataclass\nfrom collections.abc import Sequence",
    "from harness.graphs import graph_capture\nfrom harness import graphs",
    "from assignments.cuda_graph_decode.model import build_model",
    "import torch.distributed as dist\nfn = getattr(dist, 'all_gather_single', None)",
    "def open(path):\n    return path\nopen('x')",  # a name the module defines itself
    "import triton\nimport triton.language as tl",
    # a submission's own attribute may share a name with a torch internal
    "class Z:\n    def __init__(self, n):\n        self._world = n",
    "from ._honest import ring_shift",
    # torch's own functions and modules that share a name with a standard module
    "import torch\ny = torch.select(torch.zeros(3), 0, 1)\nw = torch.signal.windows",
    "def f(o):\n    return getattr(o, 'shape', None)",
    "class M:\n    def __init__(self):\n        super().__init__()\n        self.w = 1",
])
def test_ordinary_code_passes(source):
    assert screen_source(source, "ring.py") == []


_KERNELS = "import torch\nimport triton\nimport triton.language as tl\n"


@pytest.mark.parametrize(("source", "what"), [
    ("import numpy as np\ndef f(x):\n    return np.exp(x)", "numpy"),
    ("def f(x):\n    return torch.tensor([v * 2 for v in x.tolist()])", ".tolist"),
    ("def f(x):\n    return torch.from_numpy(x.numpy())", "torch.from_numpy"),
    ("from torch.utils._python_dispatch import _disable_current_modes",
     "torch.utils._python_dispatch"),
    ("def f(x):\n    return torch.jit.fork(torch.exp, x)", "torch.jit.fork"),
    ("def f(x):\n    return x.clone().apply_(lambda v: v * 2)", ".apply_"),
    ("def f(x):\n    return torch.compile(torch.exp)(x)", "torch.compile"),
    ("def f(x):\n    return x.numpy().sum()", ".numpy"),
])
def test_kernel_wrappers_rule_catches_compute_the_guard_cannot_see(source, what):
    findings = screen_source(_KERNELS + source, "kernels.py")
    assert [f.rule for f in findings] and {f.rule for f in findings} == {"kernel-wrappers"}
    assert any(what in f.what for f in findings), findings


def test_kernel_wrappers_rule_applies_only_where_triton_is_imported_and_can_be_allowed():
    source = "import torch\ndef f(x):\n    return torch.softmax(x, -1).tolist()"
    assert screen_source(source, "zero.py") == []
    assert screen_source(_KERNELS + source, "kernels.py", allow=["kernel-wrappers"]) == []
    wrapper = ("def f(x):\n    y = torch.empty_like(x, dtype=torch.float32)\n"
               "    n = int(x.shape[0])\n    return y.view(n, -1).t().contiguous()")
    assert screen_source(_KERNELS + wrapper, "kernels.py") == []


@pytest.mark.parametrize("source", [
    # integer bookkeeping the README allows, with torch functions: the guard judges by dtype
    "def f(lens):\n    return int(torch.max(lens)), torch.cumsum(lens, 0)",
    "def f(lens):\n    return int(lens.max().item()), triton.cdiv(int(lens.sum()), 16)",
    # float compute is the compute guard's to catch at run time, with the operator and line
    "import torch.nn.functional as F\ndef f(x):\n    return F.softmax(x, -1)",
])
def test_kernel_wrappers_rule_leaves_what_the_guard_judges_to_the_guard(source):
    assert screen_source(_KERNELS + source, "kernels.py") == []


def test_a_finding_names_the_file_the_line_and_the_rule():
    (finding,) = screen_source("import torch\n\n\nx = eval('1')\n", "ring.py")
    assert (finding.file, finding.line, finding.rule) == ("ring.py", 4, "no-dynamic-code")
    assert finding.message() == ("ring.py:4 calls eval(); the grader runs no dynamic code — "
                                 "rule no-dynamic-code")
    assert set(RULES) >= {finding.rule}


# -- allowances ----------------------------------------------------------------------------------
def test_allowances_by_name_and_by_rule():
    source = "import os\nx = os.environ.get('A')\ny = os.getenv('B')"
    assert rules_of(source) == {"no-environment"}
    assert rules_of(source, ("os.environ",)) == {"no-environment"}  # os.getenv still screened
    assert rules_of(source, ("os.environ", "os.getenv")) == set()
    assert rules_of(source, ("no-environment",)) == set()


def test_the_manifest_reads_and_checks_screen_allow():
    course = parse_manifest(with_change("assignment.0.screen_allow", ["os.environ"]))
    assert course.assignments[0].screen_allow == ("os.environ",)
    assert course.assignments[1].screen_allow == ()
    with pytest.raises(ManifestError, match=r"assignment\[0\] \(first\)\.screen_allow"):
        parse_manifest(with_change("assignment.0.screen_allow", ["os.environz"]))
    with pytest.raises(ManifestError, match="screen_allow"):
        parse_manifest(with_change("assignment.0.screen_allow", "os.environ"))


# -- which files --------------------------------------------------------------------------------
def test_a_directory_is_screened_whole_except_the_courses_own_files(tmp_path):
    folder = tmp_path / "ppo"
    folder.mkdir()
    for name in ("ppo.py", "train_cartpole.py", "test_public.py"):  # copies of the course's
        (folder / name).write_bytes((REPO_ROOT / "assignments" / "ppo" / name).read_bytes())
    (folder / "helper.py").write_text("import ctypes\n")
    verdict = screen_impl(resolve_impl(str(tmp_path)), COURSE, "ppo", REPO_ROOT)
    assert [f.file for f in verdict.findings] == ["helper.py"], verdict.report()
    assert "train_cartpole.py" not in verdict.screened  # provided, identical: course code
    (folder / "train_cartpole.py").write_text("import importlib\n")  # replaced: screened
    verdict = screen_impl(resolve_impl(str(tmp_path)), COURSE, "ppo", REPO_ROOT)
    assert {f.file for f in verdict.findings} == {"helper.py", "train_cartpole.py"}


def test_a_mutant_is_screened_as_the_source_it_runs():
    impl = resolve_impl("mutant:ring_allreduce/backend_behind_the_log")
    verdict = screen_impl(impl, COURSE, "ring_allreduce", REPO_ROOT)
    assert any("replacements applied" in n for n in verdict.notes), verdict.notes
    assert [f.rule for f in verdict.findings] == ["no-course-internals"], verdict.report()
    assert verdict.findings[0].file == "mutants/backend_behind_the_log.py"  # its own code
    clean = screen_impl(resolve_impl("mutant:ring_allreduce/avg_divided_twice"), COURSE,
                        "ring_allreduce", REPO_ROOT)
    assert clean.passed and "ring.py (mutants/avg_divided_twice.py)" in clean.screened, \
        clean.report()


def test_mutants_stay_fair_where_the_solution_is():
    # a mutant may trip the screen (it is never gated), but only where it departs from the
    # solution: the patched text of every mutant of a clean solution is screened, none crash
    for assignment in COURSE.ids:
        folder = REPO_ROOT / "solutions" / assignment / "mutants"
        for path in sorted(folder.glob("[!_]*.py")):
            impl = resolve_impl(f"mutant:{assignment}/{path.stem}")
            verdict = screen_impl(impl, COURSE, assignment, REPO_ROOT)
            assert verdict.screened, path


# -- the graded test and its gate ----------------------------------------------------------------
def _session(submission: Path, *extra: str):
    paths = suite_paths("ring_allreduce", REPO_ROOT, submission / "no-hidden")
    return run_session(paths, resolve_impl(str(submission)), suites=submission / "no-hidden",
                       extra=["-k", "test_chunk_bounds", *extra], timeout=300)


def test_a_screened_submission_fails_the_screen_and_runs_nothing_else():
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "ring_allreduce").mkdir()
        source = (REPO_ROOT / "solutions" / "ring_allreduce" / "ring.py").read_text()
        (root / "ring_allreduce" / "ring.py").write_text(source + "\n_x = eval('1')\n")
        session = _session(root)
        assert session.result is not None, session.problem
        tests = {t.name: t for t in session.result.tests}
        assert tests["screen"].points == 0 and tests["screen"].outcome == "failed"
        assert tests["screen"].reason.startswith("screen: ring.py:"), tests["screen"].reason
        assert "rule no-dynamic-code" in tests["screen"].reason
        others = [t for name, t in tests.items() if name != "screen"]
        assert others and all(t.outcome == "failed" and t.reason.startswith("screened: ring.py")
                              for t in others), others
        assert session.result.score == 0

        session = _session(root, "--screen", "off")  # instructors: the layer behind it
        assert session.result is not None, session.problem
        tests = {t.name: t for t in session.result.tests}
        assert tests["screen"].passed  # reported only
        assert session.result.score == sum(t.points for t in tests.values())


def test_a_clean_submission_passes_the_screen_as_a_zero_point_test():
    session = run_session(suite_paths("ring_allreduce", REPO_ROOT, REPO_ROOT / "no-hidden"),
                          resolve_impl("solutions"), suites=REPO_ROOT / "no-hidden",
                          extra=["-k", "test_chunk_bounds"], timeout=300)
    assert session.result is not None, session.problem
    names = [t.name for t in session.result.tests]
    assert names[0] == "screen", names
    assert session.result.tests[0].passed and session.result.tests[0].points == 0
    assert session.result.score == session.result.max_score > 0


def test_screen_of_the_dir_kind_without_the_folder_notes_nothing_to_screen(tmp_path):
    verdict = screen("dir", tmp_path, "ring_allreduce", ("ring",), (), REPO_ROOT)
    assert verdict.passed and verdict.notes
