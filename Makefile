# Two commands on a fresh clone: `make run` (local stack, shows it working) and `make test`.
# Each installs first when needed; the stamp makes repeat runs skip the install.
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTHON ?= python3

.PHONY: install run dev test unit lint typecheck format clean deploy-check citus browser

install: $(STAMP)

# torch goes first so pip takes the CPU wheel on disk instead of a multi-GB CUDA build. The
# runtime dependencies install at their pins in constraints.txt, as in the image, so tests run
# what ships and a new upstream release cannot change a clean clone's result. The extras name
# the development tools (llm-bot-tools), which come from tools/ in this checkout.
$(STAMP): pyproject.toml tools/pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet --constraint constraints.txt -e '.[local,dev]' -e ./tools
	touch $(STAMP)

run: install
	$(BIN)/llm-bot dev

dev: install
	$(BIN)/llm-bot dev --services-only

# The suites that must hold on Citus as on one Postgres: `make test` runs them a second time
# with every test's database on a local Citus cluster (docs/citus.md, "The tests"), with the
# tests of Citus itself, which the whole suite's run leaves to it: the two runs then take
# about as long as each other.
CITUS_SUITES := tests/integration/db tests/integration/memory tests/integration/worker \
	tests/integration/handler tests/integration/lifecycle tests/integration/citus

# The local PostgreSQL (a portable pgvector, and Citus when its source lies beside the clone)
# is built or its cache reused first; without Citus's source the Citus tests and the run on
# the cluster skip. The two runs go side by side: each spends most of its time waiting on its
# servers, so together they take little longer than the longer one. The whole suite shows its
# progress; the cluster's run is printed when it ends. The slowest tests of each are listed.
PYTEST := $(BIN)/pytest -q --durations=10
CITUS_LOG := .llm-bot/pytest-citus.log

test: install lint typecheck browser
	$(BIN)/python -m llm_bot_tools.local.postgres_build --citus --if-source
	mkdir -p .llm-bot
	$(PYTEST) --basetemp=.llm-bot/pytest-citus --database=citus $(CITUS_SUITES) \
		> $(CITUS_LOG) 2>&1 & cluster=$$!; \
	$(PYTEST) --basetemp=.llm-bot/pytest --ignore=tests/integration/citus; suite=$$?; \
	wait $$cluster; on_citus=$$?; \
	echo "== the suites on Citus:"; cat $(CITUS_LOG); \
	test $$suite -eq 0 && test $$on_citus -eq 0

# The console's browser tests (tests/integration/console) drive Debian's chromium through
# Playwright, never a browser Playwright downloads. Installed here where it can be (as root,
# with apt-get: CI, a container); where it cannot, those tests are skipped, said in one line.
browser:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || \
		echo "browser tests skipped: apt-get install chromium failed"; \
	else echo "browser tests skipped: no /usr/bin/chromium (as root: apt-get install chromium)"; fi

# Citus from ../shared/vendor (LLM_BOT_CITUS_SOURCE overrides) into a cache outside the clone:
# docs/citus.md.
citus: install
	$(BIN)/python -m llm_bot_tools.local.postgres_build --citus

unit: install
	$(BIN)/pytest -q tests/unit

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@$(MAKE) --no-print-directory deploy-check

# The Dockerfile and deploy scripts: hadolint and shellcheck come as wheels in the dev extra.
deploy-check: install
	$(BIN)/hadolint Dockerfile
	$(BIN)/shellcheck deploy/*.sh

# The service and the development tools, each strict.
typecheck: install
	$(BIN)/mypy --strict llm_bot tools/llm_bot_tools

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .llm-bot .pytest_cache .mypy_cache .ruff_cache
