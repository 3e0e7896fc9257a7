# Two commands for a fresh machine with Python >= 3.11:  `make demo`  and  `make test`.
# Everything is installed into ./.venv from uv.lock; nothing is installed system-wide.
# Where `python3` is older (Alma 9 and lxplus ship 3.9), name a newer one: make demo PYTHON=python3.11

PYTHON ?= python3
UV := .tools/bin/uv
VENV := .venv
TOOLS_DIR ?= $(HOME)/.cache/landb-webhook

.PHONY: demo test lint e2e-tools kube-tools deploy-tools prometheus-tools grafana-dashboard image bench bench-scale soak clean

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check 'uv>=0.5,<1'

$(VENV)/.synced: $(UV) pyproject.toml packages/simulator/pyproject.toml uv.lock
	$(UV) sync --frozen --extra dev --python $(PYTHON)
	@touch $@ $(VENV)/.synced-demo

# The demo needs the package, the simulator and the openstack CLI only; --inexact keeps a developer's
# test tools.
$(VENV)/.synced-demo: $(UV) pyproject.toml packages/simulator/pyproject.toml uv.lock
	$(UV) sync --frozen --inexact --extra demo --python $(PYTHON)
	@touch $@

demo: $(VENV)/.synced-demo  ## run the webhook against the simulator (ARGS='--api-port 18888' to move it)
	$(VENV)/bin/landb-webhook-simulator demo $(ARGS)

test: $(VENV)/.synced  ## lint, type-check, check the layers and run every test (e2e ones skip without external-dns)
	$(VENV)/bin/ruff check src packages tests bench
	$(VENV)/bin/ruff format --check src packages tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-logo
	$(VENV)/bin/pytest

e2e-tools:  ## build the real external-dns used by tests/e2e (needs Go)
	LANDB_TOOLS_DIR=$(TOOLS_DIR) scripts/install-external-dns.sh

kube-tools:  ## build the real kube-apiserver and etcd the Kubernetes tests also run against (needs Go)
	LANDB_TOOLS_DIR=$(TOOLS_DIR) scripts/install-kube-apiserver.sh

prometheus-tools:  ## build the real prometheus and promtool the alert tests run (needs Go)
	LANDB_TOOLS_DIR=$(TOOLS_DIR) scripts/install-prometheus.sh

grafana-dashboard:  ## write the dashboard's ConfigMap (deploy/grafana/) from its JSON, after editing the JSON
	scripts/grafana-configmap.sh

deploy-tools:  ## build helm and fetch the official external-dns chart the deploy tests render (needs Go)
	LANDB_TOOLS_DIR=$(TOOLS_DIR) scripts/install-helm.sh

image: $(VENV)/.synced  ## build the image with Debian's packages (apt-get installs buildah, podman), smoke-run it
	LANDB_TOOLS_DIR=$(TOOLS_DIR) scripts/build-image.sh
	scripts/smoke-image.sh

bench: $(VENV)/.synced  ## the benchmark, side by side with two reference strategies (see bench/README.md)
	$(UV) sync --frozen --extra dev --extra bench --python $(PYTHON)
	$(VENV)/bin/python -m bench.run $(ARGS)

bench-scale: $(VENV)/.synced  ## this provider alone at growing sizes, each cost's slope (see bench/README.md)
	$(VENV)/bin/python -m bench.scale $(ARGS)

soak: $(VENV)/.synced  ## 2,000 steady-state loops: nothing written, the webhook's RSS at start and end
	$(VENV)/bin/python -m bench.soak

clean:
	rm -rf .tools $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .import_linter_cache
