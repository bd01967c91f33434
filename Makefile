# The two commands of the README's quick start are `make run` and `make test`.
PY := .venv/bin/python
LISTEN ?= 127.0.0.1:9433

.PHONY: run test lint docs bootstrap bootstrap-tools stack dashboards

bootstrap:
	@scripts/bootstrap.sh

bootstrap-tools:
	@scripts/bootstrap.sh --tools

## run: the exporter on the built-in simulated 8-GPU node (http://$(LISTEN)/metrics)
run: bootstrap
	$(PY) -m exporter --simulate --listen $(LISTEN) --log-format console

## test: lint, type-check, generated-docs check and the whole test suite
test: bootstrap-tools
	$(PY) -m ruff check exporter tests bench scripts dashboards
	$(PY) -m mypy
	$(PY) -m exporter.metrics.docs --check
	$(PY) -m pytest -q

## docs: regenerate docs/metrics.md from the code
docs: bootstrap
	$(PY) -m exporter.metrics.docs

## stack: exporter (simulated node) + Prometheus with our rules + Alertmanager -> local webhook
stack: bootstrap-tools
	$(PY) scripts/stack.py

## dashboards: regenerate dashboards from dashboards/generator
dashboards: bootstrap
	$(PY) -m dashboards.generator
