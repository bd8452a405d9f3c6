"""pyproject.toml declares what the harness and the grader import, and its wheels ship neither
tests nor hidden suites."""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import setuptools

from grader.manifest import REPO_ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

FIRST_PARTY = {"harness", "grader", "assignments", "solutions"}
NOT_SHIPPED = ("harness/tests", "grader/tests", "grader/suites")


def _pyproject() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement such as `tomli>=2; python_version...`."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]).lower()


def _shipped_sources() -> list[Path]:
    files = []
    for top in ("harness", "grader"):
        for path in sorted((REPO_ROOT / top).rglob("*.py")):
            relative = path.relative_to(REPO_ROOT).as_posix()
            if not relative.startswith(NOT_SHIPPED):
                files.append(path)
    return files


def _imported_top_levels(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_wheel_leaves_out_tests_and_hidden_suites():
    find = _pyproject()["tool"]["setuptools"]["packages"]["find"]
    packages = setuptools.find_packages(str(REPO_ROOT), include=find["include"],
                                        exclude=find.get("exclude", ()))
    assert "harness" in packages and "grader" in packages and "grader.bench" in packages
    leaked = [p for p in packages if p.split(".")[:2] in (["harness", "tests"],
                                                          ["grader", "tests"],
                                                          ["grader", "suites"])]
    assert not leaked, f"the wheel would ship {leaked}; extend [tool.setuptools.packages.find]"


def test_every_third_party_import_is_a_declared_dependency():
    project = _pyproject()["project"]
    declared = {_name(r) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        declared |= {_name(r) for r in extra}
    distributions = packages_distributions()
    missing = {}
    for path in _shipped_sources():
        for module in _imported_top_levels(path) - FIRST_PARTY:
            if module in sys.stdlib_module_names or module == "__future__":
                continue
            names = {_name(d) for d in distributions.get(module, [module])}
            if module == "tomli":
                names = {"tomli"}  # the Python 3.10 fallback of tomllib
            if not names & declared:
                missing.setdefault(module, []).append(path.relative_to(REPO_ROOT).as_posix())
    assert not missing, f"imported but not in pyproject.toml's dependencies or extras: {missing}"


def test_the_release_template_declares_the_same_packages():
    template = REPO_ROOT / "grader" / "release_files" / "pyproject.toml.tmpl"
    if not template.is_file():  # moved by a refactor: test_release checks [project] anyway
        template = next(REPO_ROOT.glob("grader/**/release_files/pyproject.toml.tmpl"))
    student = tomllib.loads(template.read_text(encoding="utf-8"))
    assert student["tool"]["setuptools"] == _pyproject()["tool"]["setuptools"]
