"""rlhf_system: TODO(grader new) what this benchmark compares, as ratios measured side by side.

    python -m grader bench rlhf_system [--impl solutions|assignments|DIR]
"""

from __future__ import annotations

import argparse

from grader.bench import add_impl_option


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench rlhf_system", description=__doc__)
    add_impl_option(parser)
    args = parser.parse_args(argv)
    print(f"rlhf_system: no benchmark yet ({args.impl.argument})")
    return 0
