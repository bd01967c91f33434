# The two commands of the README's quick start are `make run` and `make test`.
PY := .venv/bin/python
LISTEN ?= 127.0.0.1:9433

.PHONY: run test fuzz llama-server lint docs bootstrap bootstrap-runtime bootstrap-tools stack dashboards mixin image dist

bootstrap:
	@scripts/bootstrap.sh

bootstrap-runtime:
	@scripts/bootstrap.sh --runtime

bootstrap-tools:
	@scripts/bootstrap.sh --tools

## run: the exporter on the built-in simulated node, one workload per GPU, and two simulated
##      serving engines (http://$(LISTEN)/)
run: bootstrap-runtime
	$(PY) -m exporter --simulate --simulate-engines --listen $(LISTEN) --log-format console

## test: lint, type-check, generated-docs check and the whole test suite
test: bootstrap-tools llama-server
	$(PY) -m ruff check exporter tests testkit bench scripts dashboards mixin
	$(PY) -m mypy
	$(PY) -m exporter.docgen.metrics --check
	$(PY) -m exporter.docgen.settings --check
	$(PY) -m mixin --check
	$(PY) -m pytest -q

## fuzz: the property tests with fresh random examples, FUZZ_RUNS times (make test is derandomized)
FUZZ_RUNS ?= 5
fuzz: bootstrap
	@for i in $$(seq $(FUZZ_RUNS)); do echo "fuzz run $$i/$(FUZZ_RUNS)"; \
	  HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q -p no:cacheprovider \
	    $$(grep -rl --include='test_*.py' '^from hypothesis' tests) || exit 1; done

## llama-server: build the real llama-server the serving tests use, once, with progress
##               (cached under ~/.cache/gpu-goodput-exporter; skipped without cmake and g++)
llama-server: bootstrap-tools
	@$(PY) -m tests.support.llama_build

## docs: regenerate docs/metrics.md and docs/settings.md from the code
docs: bootstrap-runtime
	$(PY) -m exporter.docgen.metrics
	$(PY) -m exporter.docgen.settings

## stack: exporter (simulated node) + Prometheus with our rules + Alertmanager -> local webhook
stack: bootstrap-tools
	$(PY) scripts/stack.py

## mixin: regenerate alerts/*.rules.yml and dashboards/*.json from mixin/config.yaml
##        (your overrides: make mixin MIXIN_CONFIG=my.yaml MIXIN_OUT=build/)
MIXIN_CONFIG ?=
MIXIN_OUT ?= .
mixin: bootstrap
	$(PY) -m mixin --out $(MIXIN_OUT) $(if $(MIXIN_CONFIG),--config $(MIXIN_CONFIG))

## dashboards: same as mixin (the dashboards are part of it)
dashboards: mixin

## image: the container image with docker, podman or buildah (IMAGE_ARGS="--tag reg/x:1 ...")
image:
	scripts/image.sh $(IMAGE_ARGS)

## dist: sdist, wheel (twine-checked) and the Helm chart .tgz in dist/
dist: bootstrap
	$(PY) scripts/package.py
