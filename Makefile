# Two entry points, both safe to run twice on a fresh Debian machine with Python 3.11:
#   make demo   - set up, then run the main job (gateway demo on the embedded cluster)
#   make test   - set up, then run the whole test suite (mock backend, then Kafka tests on noida)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test setup system lint

demo: setup
	$(BIN)/gateway demo

test: setup
	bash .ci/test

setup: system $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,spark,bench,dev]'
	touch $(STAMP)

# redis-server comes from Debian; the tests and the demo start their own instance on a free port.
system:
	@command -v redis-server >/dev/null 2>&1 || [ -x /usr/sbin/redis-server ] || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server >/dev/null; }

lint: setup
	$(BIN)/ruff check gateway stores tests benchmarks
	$(BIN)/mypy
