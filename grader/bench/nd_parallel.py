"""nd_parallel: TODO(grader new) what this benchmark compares, as ratios measured side by side.

    python -m grader bench nd_parallel [--impl solutions|assignments|DIR]
"""

from __future__ import annotations

import argparse

from grader.bench import add_impl_option


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench nd_parallel", description=__doc__)
    add_impl_option(parser)
    args = parser.parse_args(argv)
    print(f"nd_parallel: no benchmark yet ({args.impl.argument})")
    return 0
