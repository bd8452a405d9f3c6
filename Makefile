# mlsys-labs: `make test` and `make grade` work on a fresh machine with Python >= 3.10 and make.
include venv.mk
ARGS   ?=

.PHONY: test grade selfcheck lint bench release gpu-check

## make test: lint (ruff, mypy; seconds), the doctor of every assignment (files only; seconds),
## the project's own tests (harness, grader), then the selfcheck of every assignment.
test: lint
	$(PY) -m grader doctor --quiet
	@# Three workers on two cores: a worker's tests wait on the sessions and launches they start,
	@# and with two the machine was a fifth to two fifths idle (docs/design.md, the budget).
	$(PY) -m pytest -n 3 harness/tests grader/tests --ignore=grader/tests/test_adversarial.py
	@# The attacks run after the rest, three at a time: a fork bomb is bounded per launch (its
	@# control group's pids.max, or the process limit of its rank's own user), not per machine.
	$(PY) -m pytest -n 3 --dist loadscope grader/tests/test_adversarial.py
	$(PY) -m grader selfcheck -j 3
	@# The GPU check's plan, dry-run: on a CPU machine it runs nothing, so it cannot rot unseen.
	$(PY) -m grader gpu-check --dry-run > /dev/null && echo "gpu-check: plan ok (dry run)"

## make grade ARGS="ring_allreduce --impl solutions": grade public + hidden suites.
grade: $(STAMP)
	$(PY) -m grader grade $(ARGS)

selfcheck: $(STAMP)
	$(PY) -m grader selfcheck $(ARGS)

bench: $(STAMP)
	$(PY) -m grader bench $(ARGS)

## make gpu-check: on a CUDA machine, grade every solution and stub with the GPU visible, run
## the GPU tests and benchmarks; report in grading/gpu-check.md (docs/gpu/). Without CUDA: "not run".
gpu-check: $(STAMP)
	$(PY) -m grader gpu-check $(ARGS)

## make release ARGS="--out DIR": the student repository, leak-checked (default --out release).
release: $(STAMP)
	$(PY) -m grader release $(or $(ARGS),--out release)

## make lint: ruff over the tree, mypy over harness/ and grader/ (configured in pyproject.toml).
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy
