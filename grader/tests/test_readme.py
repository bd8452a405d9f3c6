"""The README's course map is the manifest's, and the README names the commands that exist."""

from __future__ import annotations

import subprocess
import sys

from grader.session.plugin import REPO_ROOT


def test_course_map_in_readme_matches_the_manifest():
    expected = subprocess.run([sys.executable, "-m", "grader", "coursemap"], cwd=REPO_ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
    readme = (REPO_ROOT / "README.md").read_text()
    start, end = "<!-- coursemap:start -->", "<!-- coursemap:end -->"
    current = readme[readme.index(start) + len(start):readme.index(end)].strip()
    assert current == expected, ("README.md's course map is out of date; paste the output of "
                                 "`python -m grader coursemap` between the coursemap markers")


def test_every_assignment_folder_is_linked_and_has_a_readme():
    readme = (REPO_ROOT / "README.md").read_text()
    for folder in sorted((REPO_ROOT / "assignments").iterdir()):
        if folder.is_dir() and not folder.name.startswith(("_", ".")):
            assert f"assignments/{folder.name}/README.md" in readme, folder.name


def test_every_assignment_readme_states_its_tolerances_as_grader_compare_has_them():
    import re

    import torch

    from grader.compare import describe

    number = r"\d[\d.e+-]*\d"
    stated = re.compile(rf"(float64|float32|bfloat16|float16): rtol {number}, atol {number}")
    for readme in sorted((REPO_ROOT / "assignments").glob("*/README.md")):
        text = readme.read_text()
        assert "**Tolerances**" in text, f"{readme}: say which tolerances the suite uses"
        found = [m.group(0) for m in stated.finditer(text)]
        assert found, f"{readme}: state the tolerance per dtype, e.g. {describe(torch.float32)}"
        for line in found:
            current = describe(getattr(torch, line.split(":")[0]))
            assert line == current, f"{readme}: says {line!r}, grader/compare.py has {current!r}"
