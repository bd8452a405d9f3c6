"""harness/tempdirs.py and the launcher's disk cap: a launch's folders are bounded, and the
folders of dead sessions are swept."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness import DiskLimitError, launch, launcher, tempdirs
from harness.tests.rankfns import fill_own_folder


def test_sweep_removes_what_dead_sessions_left_and_keeps_live_ones(tmp_path):
    mine = tempdirs.make("mlsys-sandbox-", dir=str(tmp_path))
    code = ("import sys; from harness import tempdirs; "
            f"print(tempdirs.make('mlsys-interpreter-', dir={str(tmp_path)!r}))")
    dead = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=str(tempdirs.__file__).rsplit("/harness/", 1)[0]
                          ).stdout.strip()
    legacy = tmp_path / "mlsys-launch-old"
    legacy.mkdir()
    os.utime(legacy, (1, 1))  # no owner file, untouched for decades
    recent = tmp_path / "mlsys-sidecar-new"
    recent.mkdir()
    other = tmp_path / "not-ours"
    other.mkdir()
    removed = tempdirs.sweep(str(tmp_path))
    assert sorted(removed) == sorted([dead, str(legacy)])
    assert os.path.isdir(mine) and recent.is_dir() and other.is_dir()
    tempdirs.release(mine)
    assert tempdirs.sweep(str(tmp_path)) == [mine]


def test_usage_counts_blocks_by_lstat(tmp_path):
    (tmp_path / "real").write_bytes(b"x" * 100_000)
    (tmp_path / "link").symlink_to("/usr")
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(1 << 30)
    used, entries = tempdirs.usage(str(tmp_path), 100)
    assert 100_000 <= used < 200_000 and entries == 3


def test_a_launch_that_fills_its_folders_is_ended(monkeypatch):
    monkeypatch.setattr(launcher, "DISK_CAP_BYTES", 4 * 2**20)
    with pytest.raises(DiskLimitError, match="over the cap"):
        launch(fill_own_folder, 1, args=(10_000, 2**20), max_result_bytes=2**20, timeout=120)
    monkeypatch.setattr(launcher, "DISK_MAX_ENTRIES", 500)
    with pytest.raises(DiskLimitError, match="files and folders"):
        launch(fill_own_folder, 1, args=(100_000, 0), max_result_bytes=2**20, timeout=120)
    assert launch(fill_own_folder, 1, args=(3, 1024), max_result_bytes=2**20).values == [3]
