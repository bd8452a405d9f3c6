"""Nothing a rank produced is ever unpickled: result files are loaded with weights_only."""

from __future__ import annotations

import io
import os
import pickle
import re
import time
import zipfile

import pytest
import torch

from harness import PayloadError, payload
from harness.pickle_opcodes import read_opcodes


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


# --- validated before materialised (issue 27, item 4) ----------------------------------------

def _vmhwm_mb() -> int:
    """Peak resident memory of this process so far, in MiB (0 without /proc)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def _save(value) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _with_pickle(pickled: bytes, template=None, extra: dict[str, bytes] | None = None) -> bytes:
    """A torch.save archive whose data.pkl is `pickled` (records taken from `template`)."""
    source = zipfile.ZipFile(io.BytesIO(_save(template if template is not None else 0)))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for info in source.infolist():
            data = pickled if info.filename.endswith("/data.pkl") else source.read(info)
            archive.writestr(info.filename, data)
        for name, data in (extra or {}).items():
            archive.writestr(name, data)
    return out.getvalue()


def _patched(data: bytes, old: bytes, new: bytes) -> bytes:
    """`data` (a torch.save archive) with `old` replaced by `new` once in its data.pkl."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for info in source.infolist():
            record = source.read(info)
            if info.filename.endswith("/data.pkl"):
                assert record.count(old) == 1
                record = record.replace(old, new)
            archive.writestr(info.filename, record)
    return out.getvalue()


def _shared_references(levels: int = 40) -> list:
    value: list = [0]
    for _ in range(levels):
        value = [value, value]  # 2^levels paths to the innermost list, 40 small lists on disk
    return value


def _load_bytes(tmp_path, data: bytes, **kwargs):
    path = tmp_path / "rank1.result.pt"
    path.write_bytes(data)
    return payload.load(str(path), who="rank 1 of 2", **kwargs)


def test_shared_references_are_counted_per_path_and_refused_at_once(tmp_path):
    data = _save({"value": _shared_references(), "comm": []})
    assert len(data) < 4096
    started = time.monotonic()
    with pytest.raises(PayloadError, match=r"^rank 1 of 2 returned a result that expands to "
                                           r"more than 500000 nodes \(shared references"):
        _load_bytes(tmp_path, data)
    assert time.monotonic() - started < 5


def test_a_few_shared_references_under_the_cap_are_plain_data(tmp_path):
    block = torch.arange(4.0)
    value = {"a": [block, block], "b": _shared_references(10)}  # 2^10 paths: fine
    summary = payload.inspect(_save(value))
    assert summary.tensor_bytes == 2 * 16 and summary.storage_bytes == 16
    assert summary.nodes == 1 + 3 + (2 ** 11 - 1) + 2 ** 10
    back = _load_bytes(tmp_path, _save(value))
    assert torch.equal(back["a"][1], block)


def test_a_stride0_expanded_tensor_is_refused_before_it_is_materialised(tmp_path):
    data = _save({"value": torch.zeros(1).expand(600_000_000), "comm": []})  # 2.4 GB as a view
    assert len(data) < 4096
    before = _vmhwm_mb()
    with pytest.raises(PayloadError, match=r"^rank 1 of 2 returned a result that holds a "
                                           r"tensor that is an expanded \(stride-0\) view"):
        _load_bytes(tmp_path, data)
    assert _vmhwm_mb() - before < 100  # MiB: nothing of the 2.4 GB was allocated


@pytest.mark.parametrize("view, why", [
    (lambda: torch.zeros(200).as_strided((100, 10), (1, 1)), "overlapping view"),
    (lambda: torch.zeros(3, 1).expand(3, 4), "expanded (stride-0) view"),
])
def test_views_that_are_not_plain_are_refused(tmp_path, view, why):
    try:
        data = _save({"value": view(), "comm": []})
    except RuntimeError:
        pytest.skip("this torch refuses to build the view")
    with pytest.raises(PayloadError, match=re.escape(why)):
        _load_bytes(tmp_path, data)


def test_a_view_outside_its_storage_is_refused(tmp_path):
    data = _save({"value": torch.zeros(100)[90:], "comm": []})  # offset 90, 10 elements
    # BININT1 90 (offset), BININT1 10, TUPLE1 (size) -> offset 95: reaches element 104
    forged = _patched(data, b"K\x5aK\x0a\x85", b"K\x5fK\x0a\x85")
    with pytest.raises(PayloadError, match="out of its storage"):
        _load_bytes(tmp_path, forged)


def test_a_negative_stride_is_refused(tmp_path):
    data = _save({"value": torch.zeros(4), "comm": []})
    forged = _patched(data, b"K\x01\x85", b"J\xff\xff\xff\xff\x85")  # stride (-1,)
    with pytest.raises(PayloadError, match="negative stride"):
        _load_bytes(tmp_path, forged)


def test_a_storage_the_archive_does_not_hold_is_refused(tmp_path):
    data = _save({"value": torch.zeros(4), "comm": []})
    forged = _patched(data, b"K\x04t", b"K\x40t")  # the storage says 64 elements, the record 4
    with pytest.raises(PayloadError, match="does not hold"):
        _load_bytes(tmp_path, forged)


def test_deep_nesting_is_refused_without_recursion(tmp_path):
    depth = 100_000
    pickled = b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."
    with pytest.raises(PayloadError, match="nested more than 64 levels deep"):
        _load_bytes(tmp_path, _with_pickle(pickled))
    nested: list = []
    for _ in range(65):
        nested = [nested]
    with pytest.raises(PayloadError, match="nested more than 64 levels deep"):
        _load_bytes(tmp_path, _save(nested))
    with pytest.raises(PayloadError, match="nested more than 64 levels deep"):
        payload.check_plain(nested)


def test_a_list_that_contains_itself_is_refused(tmp_path):
    loop: list = [1]
    loop.append(loop)
    with pytest.raises(PayloadError, match="contains itself"):
        _load_bytes(tmp_path, _save(loop))
    with pytest.raises(PayloadError, match="nested more than"):
        payload.to_plain(loop)


@pytest.mark.parametrize("build, why", [
    (lambda: b"not a zip", "unreadable result file"),
    (lambda: _with_pickle(pickle.dumps(0, protocol=2), extra={"archive/constants.pkl": b"x"}),
     "not a plain torch.save archive"),
    (lambda: _with_pickle(b"\x80\x02cbuiltins\nset\n)R."), "refers to builtins.set"),
    (lambda: _with_pickle(b"\x80\x02ctorch._utils\n_rebuild_parameter\n)R."),
     "refers to torch._utils._rebuild_parameter"),
    (lambda: _with_pickle(b"\x80\x02ccollections\nOrderedDict\n)R."), "hooks object"),
    (lambda: _with_pickle(b"\x80\x02]\x94."), "MEMOIZE"),
    (lambda: _with_pickle(b"\x80\x02K\x01K\x02."), "malformed pickle"),
    (lambda: _with_pickle(b"\x80\x02h\x05."), "unknown memo key"),
    (lambda: _with_pickle(b"\x80\x02}](s."), "malformed pickle"),
    (lambda: _with_pickle(b"\x80\x02}]K\x01s."), "dict key that is not a str or int (list)"),
])
def test_archives_and_pickles_torch_save_never_writes_are_refused(tmp_path, build, why):
    with pytest.raises(PayloadError, match=re.escape(why)):
        _load_bytes(tmp_path, build())


def test_a_compressed_record_is_refused(tmp_path):
    source = zipfile.ZipFile(io.BytesIO(_save(torch.zeros(1000))))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            archive.writestr(info.filename, source.read(info))
    with pytest.raises(PayloadError, match="compressed record"):
        _load_bytes(tmp_path, out.getvalue())


def test_tensor_bytes_are_capped_per_path(tmp_path):
    block = torch.zeros(1024)  # 4 KiB
    with pytest.raises(PayloadError, match="holds tensors of more than 65536 bytes"):
        _load_bytes(tmp_path, _save([block] * 20), max_bytes=64 * 1024)  # 80 KiB by path
    _load_bytes(tmp_path, _save([block] * 10), max_bytes=64 * 1024)


@pytest.mark.parametrize("value", [
    torch.zeros(3, 4).t(),  # dense, not contiguous
    torch.zeros(0, 5),
    torch.tensor(7, dtype=torch.int64),
    torch.zeros(2, dtype=torch.bfloat16),
    torch.zeros(2, dtype=torch.complex64),
    torch.zeros(2, dtype=torch.bool),
    torch.zeros(2, dtype=torch.uint16),  # written with _rebuild_tensor_v3
    torch.zeros(2, 3).to(memory_format=torch.contiguous_format)[:, 1:],
])
def test_every_tensor_to_plain_writes_loads(tmp_path, value):
    path = tmp_path / "ok.pt"
    payload.dump({"value": [value, {"x": (value,)}], "comm": []}, str(path))
    back = payload.load(str(path))
    assert torch.equal(back["value"][0], value)


def test_to_plain_refuses_shared_references_in_the_rank_quickly():
    started = time.monotonic()
    with pytest.raises(PayloadError, match="expands to more than 500000 nodes"):
        payload.to_plain(_shared_references())
    assert time.monotonic() - started < 10


def test_check_plain_walks_a_loaded_shared_structure_only_up_to_the_cap():
    started = time.monotonic()
    with pytest.raises(PayloadError, match="expands to more than"):
        payload.check_plain(_shared_references())
    assert time.monotonic() - started < 10
    with pytest.raises(PayloadError, match="expanded"):
        payload.check_plain({"x": torch.zeros(1).expand(10)})


@pytest.mark.parametrize("size, stride, offset, numel, why", [
    ((3, 4), (4, 1), 0, 12, ""),
    ((3, 4), (1, 3), 0, 12, ""),
    ((1, 4), (0, 1), 0, 4, ""),  # a size-1 dimension's stride is never used
    ((5,), (0,), 0, 1, "stride-0"),
    ((3, 3), (1, 1), 0, 9, "overlapping"),
    ((3, 4), (4, 1), 1, 12, "out of its storage"),
    ((0, 4), (0, 0), 99, 0, ""),  # no elements
    ((2,), (1, 1), 0, 2, "mismatched"),
])
def test_check_view(size, stride, offset, numel, why):
    result = payload.check_view(size, stride, offset, numel)
    assert (why in result and bool(result) == bool(why)), result


def test_launch_fails_the_rank_that_returned_a_hostile_result():
    from harness import launch
    from harness.tests import rankfns

    before = _vmhwm_mb()
    for kind, rule in (("shared", "expands to more than"), ("stride0", "stride-0")):
        with pytest.raises(PayloadError, match=f"^rank 1 of 2 returned a result that .*{rule}"):
            launch(rankfns.forge_hostile_result, world_size=2, args=(kind,))
    assert _vmhwm_mb() - before < 200


def test_the_opcode_reader_decodes_as_pickletools_does():
    import pickletools

    values = [{"value": [torch.zeros(2, 3), -5, 2**70, -(2**40), 70000, 1.5, "é\udcff", None,
                         True, False, (), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), {}, {7: "x"}],
               "comm": [{"op": "send"}] * 3},
              torch.zeros(2, dtype=torch.uint16), list(range(300))]
    for value in values:
        pickled = zipfile.ZipFile(io.BytesIO(_save(value))).read("archive/data.pkl")
        expected = [(op.name, arg) for op, arg, _ in pickletools.genops(pickled)]
        assert list(read_opcodes(pickled)) == expected
