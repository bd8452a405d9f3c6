"""The case table of the rlhf_system suite: id -> parameters.

TODO(grader new): the cases the contract promises, cheap ones first.
"""

from __future__ import annotations

CASES = {"numel=1": 1, "numel=1000": 1000}
