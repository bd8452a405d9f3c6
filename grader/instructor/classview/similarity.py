"""Who copied whom: pairs of submissions of one assignment whose code overlaps, by copydetect.

copydetect (MOSS's winnowing, Schleimer, Wilkerson and Aiken 2003) tokenizes each submission
with Pygments, replaces every identifier by one letter (so renaming hides nothing), hashes its
k-grams and keeps a winnowed subset as fingerprints; the order of functions does not matter,
because fingerprints are compared as sets. The released stub and the provided modules of the
assignment are boilerplate: their fingerprints are removed from every submission, so the
starting point never counts.

A class of N students has N²/2 pairs per assignment. An inverted index (fingerprint -> the
submissions holding it) counts the fingerprints each pair shares; fingerprints held by more than
`common_limit` submissions are idioms, not evidence, and are ignored there, as MOSS does; only
the `max_pairs` pairs of each assignment sharing the most are compared in full
(`copydetect.compare_files`: overlap as a share of each side's tokens, and the copied spans).
"""

from __future__ import annotations

import io
import itertools
import multiprocessing
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.instructor.classview.collect import Submission
from grader.manifest import REPO_ROOT, Assignment

NOISE = 25  # copydetect's defaults: matches shorter than this (in filtered characters) ignored
GUARANTEE = 30  # matches at least this long are always found
MAX_PAIRS = 20
FLAG_AT = 0.6  # a pair whose larger overlap share reaches this is flagged


@dataclass(frozen=True)
class Pair:
    """Two submissions of one assignment and what they share."""

    assignment: str
    first: str  # student
    second: str
    share_first: float  # overlap / first's fingerprinted tokens
    share_second: float
    spans_first: tuple[tuple[int, int], ...]  # copied character spans in first's code
    spans_second: tuple[tuple[int, int], ...]
    code_first: str
    code_second: str

    @property
    def score(self) -> float:
        return max(self.share_first, self.share_second)

    def flagged(self, at: float = FLAG_AT) -> bool:
        return self.score >= at


def submission_text(code: dict[str, str]) -> str:
    """A submission's modules as one text, in module order."""
    return "".join(f"# --- {name}.py ---\n{text}\n" for name, text in code.items())


def boilerplate_text(assignment: Assignment, root: Path = REPO_ROOT) -> str:
    """The released starting point: the stubs of the editable modules, and provided modules."""
    folder = root / "assignments" / assignment.id
    parts = {}
    for name in (*assignment.modules, *assignment.provided):
        path = folder / f"{name}.py"
        if path.is_file():
            parts[name] = path.read_text(encoding="utf-8")
    return submission_text(parts)


def hashed_kgrams(text: str, k: int) -> Any:
    """The hash of every k-gram of `text`: a polynomial hash of its code points, mod 2**64.

    Replaces copydetect's own, which uses Python's `hash()`: salted per interpreter, it made
    overlaps differ by a point or two between runs, and fingerprints computed in different
    processes incomparable. This one is the same everywhere, and vectorised.
    """
    import numpy as np

    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    count = len(codes) - k + 1
    if count <= 0:
        return np.array([], dtype=np.int64)
    hashes = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(k):
            hashes = hashes * np.uint64(1_000_003) + codes[j: j + count]
    return hashes.view(np.int64)


def python_filter(code: str) -> tuple[str, Any]:
    """copydetect's `filter_code` for Python, with the standard library's tokenizer.

    The same normal form as copydetect's (which lexes with Pygments, ten times slower): names
    a submission defines become V, a function's name after `def` F, a class's after `class` O,
    a string S; keywords, builtins, `self`, imported module names, numbers and operators stay;
    whitespace and comments go. The offsets (filtered index, characters removed so far) map
    spans back to the submitted text, as copydetect's do. `tokenize.TokenError` and
    `SyntaxError` propagate (the caller falls back to copydetect's own filter).
    """
    import builtins
    import keyword
    import tokenize

    import numpy as np

    kept = set(keyword.kwlist) | set(dir(builtins)) | {"self", "cls"}
    starts = [0]
    for line in code.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    out: list[str] = []
    length = removed = at = 0
    offsets = [[0, 0]]
    previous, importing = "", False
    dropped = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
               tokenize.DEDENT, tokenize.ENDMARKER)
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        start = starts[token.start[0] - 1] + token.start[1]
        end = starts[token.end[0] - 1] + token.end[1]
        if start > at:  # whitespace between tokens
            offsets.append([length - 1, removed])
            removed += start - at
        text = code[start:end]
        if token.type == tokenize.NEWLINE:
            importing = False
        if token.type in dropped:
            if end > start:
                offsets.append([length - 1, removed])
                removed += end - start
        elif token.type in (tokenize.NAME, tokenize.STRING) and not (
                token.type == tokenize.NAME and (text in kept or importing)):
            letter = "S" if token.type == tokenize.STRING else \
                {"def": "F", "class": "O"}.get(previous, "V")
            out.append(letter)
            length += 1
            offsets.append([length - 1, removed])
            removed += len(text) - 1
        else:
            out.append(text)
            length += len(text)
        if token.type == tokenize.NAME and text in ("import", "from"):
            importing = True
        previous = text if token.type != tokenize.NL else previous
        at = max(at, end)
    return "".join(out), np.array(offsets)


def fingerprint(text: str, boilerplate: Any = None) -> Any:
    """copydetect's fingerprint of Python `text` (normalised by `python_filter`), without the
    `boilerplate` hashes."""
    import tokenize

    import copydetect.utils
    from copydetect import CodeFingerprint

    copydetect.utils.hashed_kgrams = hashed_kgrams  # deterministic (see hashed_kgrams)
    window = GUARANTEE - NOISE + 1
    try:
        filtered, offsets = python_filter(text)
    except (tokenize.TokenError, SyntaxError):  # not Python: copydetect lexes it with Pygments
        return CodeFingerprint("submission.py", NOISE, window, boilerplate=boilerplate,
                               fp=io.StringIO(text))
    fp = CodeFingerprint("submission.py", NOISE, window, boilerplate=boilerplate,
                         filter=False, fp=io.StringIO(filtered))
    fp.raw_code, fp.offsets = text, offsets
    return fp


def _fingerprint_all(jobs: list[tuple[str, Any]], workers: int) -> list[Any]:
    """The fingerprint of each (text, boilerplate) job; identical jobs are fingerprinted once
    (an untouched stub, a shared file), and many jobs in `workers` forked processes."""
    unique: dict[tuple[str, int], int] = {}
    distinct: list[tuple[str, Any]] = []
    for text, plate in jobs:
        if (text, id(plate)) not in unique:
            unique[(text, id(plate))] = len(distinct)
            distinct.append((text, plate))
    if workers <= 1 or len(distinct) < 64:
        prints = [fingerprint(text, plate) for text, plate in distinct]
    else:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            prints = pool.starmap(fingerprint, distinct, chunksize=16)
    return [prints[unique[(text, id(plate))]] for text, plate in jobs]


def similar_pairs(assignments: list[Assignment], submissions: dict[str, list[Submission]],
                  root: Path = REPO_ROOT, max_pairs: int = MAX_PAIRS, workers: int = 2,
                  common_limit: int | None = None,
                  progress: Callable[[str], None] | None = None) -> dict[str, list[Pair]]:
    """assignment id -> its most similar pairs, highest score first (submissions without code
    are left out)."""
    import numpy as np

    jobs: list[tuple[str, Any]] = []
    owners: list[tuple[str, Submission]] = []
    for assignment in assignments:
        stub = boilerplate_text(assignment, root)
        plate = np.array(sorted(fingerprint(stub).hashes)) if stub else None
        for submission in submissions.get(assignment.id, []):
            if submission.code:
                jobs.append((submission_text(submission.code), plate))
                owners.append((assignment.id, submission))
    if progress:
        progress(f"fingerprinting {len(jobs)} submissions")
    prints = _fingerprint_all(jobs, workers)
    by_assignment: dict[str, list[tuple[Submission, Any]]] = {}
    for (assignment_id, submission), fp in zip(owners, prints, strict=True):
        by_assignment.setdefault(assignment_id, []).append((submission, fp))
    result = {}
    for number, (assignment_id, entries) in enumerate(by_assignment.items(), start=1):
        result[assignment_id] = _pairs(assignment_id, entries, max_pairs, common_limit)
        if progress:
            progress(f"compared {assignment_id} ({number}/{len(by_assignment)})")
    return result


def _pairs(assignment_id: str, entries: list[tuple[Submission, Any]], max_pairs: int,
           common_limit: int | None) -> list[Pair]:
    from copydetect import compare_files

    limit = common_limit if common_limit is not None else max(10, len(entries) // 2)
    index: dict[int, list[int]] = {}
    for i, (_, fp) in enumerate(entries):
        for h in fp.hashes:
            index.setdefault(int(h), []).append(i)
    shared: Counter[tuple[int, int]] = Counter()
    for holders in index.values():
        if 1 < len(holders) <= limit:
            shared.update(itertools.combinations(holders, 2))  # counted in C

    def estimate(pair: tuple[int, int]) -> float:
        smaller = min(len(entries[pair[0]][1].hashes), len(entries[pair[1]][1].hashes))
        return shared[pair] / smaller if smaller else 0.0

    candidates = sorted(shared, key=lambda p: (-estimate(p), p))[:max_pairs]
    pairs = []
    for i, j in candidates:
        (a, fa), (b, fb) = entries[i], entries[j]
        _, (share_a, share_b), (slices_a, slices_b) = compare_files(fa, fb)
        pairs.append(Pair(assignment_id, a.student, b.student, float(share_a), float(share_b),
                          _spans(slices_a), _spans(slices_b), fa.raw_code, fb.raw_code))
    return sorted(pairs, key=lambda p: (-p.score, p.first, p.second))


def _spans(slices: Any) -> tuple[tuple[int, int], ...]:
    if len(slices) != 2 or len(slices[0]) == 0:
        return ()
    return tuple((int(s), int(e)) for s, e in zip(slices[0], slices[1], strict=True))
