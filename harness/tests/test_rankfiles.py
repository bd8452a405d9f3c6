"""harness/rankfiles.py: what a rank leaves in its folder is read as untrusted data."""

from __future__ import annotations

import os
import threading

import pytest

from harness import payload, rankfiles
from harness.errors import PayloadError


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "rank0.result.pt"
    os.mkfifo(fifo)
    done = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        try:
            rankfiles.read_capped(str(fifo), 1024)
        except BaseException as exc:  # noqa: BLE001 - judged below
            errors.append(exc)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(5), "reading a FIFO blocked: it must be opened with O_NONBLOCK"
    assert isinstance(errors[0], rankfiles.RankFileError), errors
    with pytest.raises(PayloadError, match="not a regular file"):
        payload.load(str(fifo))
    assert rankfiles.tail(str(fifo), 100) == ""


def test_a_symlink_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"x" * 100)
    link = tmp_path / "rank0.log"
    link.symlink_to(target)
    with pytest.raises(rankfiles.RankFileError, match="symbolic link"):
        rankfiles.read_capped(str(link), 1024)
    assert rankfiles.tail(str(link), 10) == ""
    assert rankfiles.size(str(link)) == 0


def test_reads_are_capped(tmp_path):
    big = tmp_path / "rank0.error.json"
    big.write_bytes(b"a" * 5000)
    with pytest.raises(rankfiles.RankFileError, match="cap"):
        rankfiles.read_capped(str(big), 4999)
    assert rankfiles.read_capped(str(big), 5000) == b"a" * 5000
    assert rankfiles.tail(str(big), 10) == "…" + "a" * 10
    with pytest.raises(FileNotFoundError):
        rankfiles.read_capped(str(tmp_path / "missing"), 10)


def test_own_bytes_counts_only_what_the_rank_really_holds(tmp_path):
    real = tmp_path / "rank0.log"
    real.write_bytes(b"x" * 8192)
    library = tmp_path / "big"
    library.write_bytes(b"y" * 1_000_000)
    symlink = tmp_path / "rank0.stack"
    symlink.symlink_to(library)
    shared = tmp_path / "rank0.result.pt"
    shared.write_bytes(b"z" * 100_000)
    os.link(shared, tmp_path / "in-the-rendezvous-folder")
    sparse = tmp_path / "rank0.error.json"
    with open(sparse, "wb") as f:
        f.truncate(64 * 2**20)
    counted = rankfiles.own_bytes(str(p) for p in (real, symlink, shared, sparse))
    assert 8192 <= counted < 8192 + 64 * 1024, counted
