"""The README's course map is the manifest's, and the README names the commands that exist."""

from __future__ import annotations

import subprocess
import sys

from grader.plugin import REPO_ROOT


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
