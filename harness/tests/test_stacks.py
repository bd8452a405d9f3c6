"""harness.stacks: the first line of a hang says who waited on what, from the stacks alone."""

from __future__ import annotations

from harness.stacks import hang_headline, waiting_in

TORCH = "/venv/lib/python3.11/site-packages/torch/distributed"
A2A_STACK = f'''Current thread 0x00007f (most recent call first):
  File "{TORCH}/distributed_c10d.py", line 4020 in all_to_all_single
  File "{TORCH}/c10d_logger.py", line 81 in wrapper
  File "/work/sub/moe/layer.py", line 88 in backward
  File "/venv/lib/python3.11/site-packages/torch/autograd/function.py", line 306 in apply
  File "/work/harness/rankmain.py", line 40 in main
'''
LOOP_STACK = '''Current thread 0x00007f (most recent call first):
  File "/work/sub/pipe/schedule.py", line 12 in warm_up
  File "/work/harness/rankmain.py", line 40 in main
'''


def test_the_call_waited_in_and_its_caller_come_from_the_stack():
    assert waiting_in(A2A_STACK) == ("all_to_all_single", "layer.py:88 in backward")
    assert waiting_in(LOOP_STACK) == ("warm_up", "schedule.py:12 in warm_up")
    assert waiting_in("") == ("", "")


def test_the_headline_groups_ranks_and_names_those_that_returned():
    line = hang_headline({0: A2A_STACK}, 4)
    assert line == ("rank 0 of 4 waits in all_to_all_single (called from layer.py:88 in "
                    "backward) while ranks 1-3 returned")
    both = hang_headline({0: A2A_STACK, 1: LOOP_STACK, 3: A2A_STACK}, 4)
    assert both.startswith("ranks 0, 3 of 4 wait in all_to_all_single")
    assert "rank 1 waits in warm_up" in both and both.endswith("while rank 2 returned")


def test_the_headline_is_never_empty():
    assert hang_headline({}, 2) == "none of 2 ranks gave a stack while ranks 0-1 returned"
    assert hang_headline({1: "(no stack: the rank did not answer SIGUSR1)"}, 2) == (
        "rank 1 of 2 gave no stack while rank 0 returned")
