# The pinned environment, one recipe for this repository's Makefile and the student release's
# (both `include venv.mk`; the release ships this file as it is): `.venv` with requirements.txt
# under constraints.txt, made on first use and again when either file changes.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv clean-venv

$(STAMP): requirements.txt constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -c constraints.txt
	@touch $(STAMP)

## make venv: only the environment (the pull-request workflow's first step).
venv: $(STAMP)

clean-venv:
	rm -rf $(VENV)
