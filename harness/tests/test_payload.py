"""Nothing a rank produced is ever unpickled: result files are loaded with weights_only."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from harness import PayloadError, payload


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_a_malicious_pickle_is_refused_and_never_run(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "rank0.result.pt"
    path.write_bytes(pickle.dumps({"value": _Evil(str(marker)), "comm": []}))
    with pytest.raises(PayloadError, match="unreadable result file"):
        payload.load(str(path))
    assert not marker.exists()


def test_a_forged_torch_file_with_objects_is_refused(tmp_path):
    path = tmp_path / "r.pt"
    torch.save({"value": _Evil(str(tmp_path / "pwned")), "comm": []}, path)
    with pytest.raises(PayloadError):
        payload.load(str(path))
    assert not (tmp_path / "pwned").exists()


def test_oversized_files_are_not_read(tmp_path):
    path = tmp_path / "big.pt"
    path.write_bytes(b"0" * 10_000)
    with pytest.raises(PayloadError, match="over the cap"):
        payload.load(str(path), max_bytes=100)


def test_round_trip_of_plain_data(tmp_path):
    value = {"a": [torch.ones(2), 1, 2.5, "s", None, True], 3: (torch.zeros(1, dtype=torch.int64),)}
    payload.dump(value, str(tmp_path / "ok.pt"))
    back = payload.load(str(tmp_path / "ok.pt"))
    assert torch.equal(back["a"][0], torch.ones(2)) and back["a"][1:] == [1, 2.5, "s", None, True]
    assert back[3][0].dtype == torch.int64


@pytest.mark.parametrize("bad, where", [
    ({"k": {1.5: 1}}, "result['k'] has a key of type float"),
    ([torch.ones(2).to_sparse()], "result[0] is a torch.sparse_coo tensor"),
    ({"x": set()}, "result['x'] is a builtins.set"),
])
def test_non_plain_values_name_their_path(bad, where):
    with pytest.raises(PayloadError) as info:
        payload.to_plain(bad)
    assert str(info.value).startswith(where)
