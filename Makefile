# damacy for Go. `make test` is what CI runs (through .ci/run).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

GO        ?= go
PKGS      := ./...
# nvCOMP wheel fetched by `make nvcomp-fetch` for the GPU host (pinned).
NVCOMP_VERSION ?= 6.0.0.12
NVCOMP_WHEEL   := nvidia-libnvcomp-cu13==$(NVCOMP_VERSION)
# MinIO for the s3:// tests (zarr/remote/remotetest.MinIOVersion must be
# the same): built from its Go module into .cache/minio/ by `make minio`.
MINIO_VERSION ?= v0.0.0-20260212201848-7aac2a2c5b7c
MINIO_DIR     := $(CURDIR)/.cache/minio
# fake-gcs-server, a GCS emulator, for the gs:// tests (its version must be
# zarr/remote/remotetest.FakeGCSVersion): built into .cache/fake-gcs-server/
# by `make fake-gcs`.
FAKE_GCS_VERSION ?= v1.54.0
FAKE_GCS_DIR     := $(CURDIR)/.cache/fake-gcs-server
# Python used by the cross-check tests; .ci/run creates .venv.
DAMACY_PYTHON ?= $(if $(wildcard $(CURDIR)/.venv/bin/python),$(CURDIR)/.venv/bin/python,)
export DAMACY_PYTHON

.PHONY: all build test lint nocgo demo ptx gpu-bins nvcomp-fetch minio fake-gcs getload remote-bins test-getload bench clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/damacy ./cmd/damacy

# gofmt, vet, a cgo-free build, no `import "C"` anywhere, then the tests
# (race detector on; the detector itself needs cgo, the product does not),
# with the Python package type-checked first.
test: lint nocgo typecheck
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 45m $(PKGS)
	$(MAKE) --no-print-directory test-getload
	$(MAKE) --no-print-directory test-python

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go') $$(git ls-files --others --exclude-standard '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

nocgo:
	CGO_ENABLED=0 $(GO) build $(PKGS)
	@if $(GO) list -f '{{.ImportPath}}: {{join .Imports " "}}' $(PKGS) | grep -E '(^|[: ])C( |$$)'; then \
	  echo 'a package imports "C": the module must build with CGO_ENABLED=0'; exit 1; fi
	@echo "no package imports \"C\""

demo: build
	./bin/damacy demo

# Rebuild the embedded PTX from the CUDA C sources (needs nvcc).
ptx:
	$(GO) generate ./...

# Cross-build every package's tests and the damacy binary as stripped,
# cgo-free binaries for a GPU host that has no Go, plus .gpu/run.sh.
gpu-bins:
	@mkdir -p .gpu
	@rm -f .gpu/*.test .gpu/*.gz .gpu/damacy .gpu/packages.txt
	@for p in $$($(GO) list $(PKGS)); do \
	  dir=$${p#github.com/damacy-go/damacy}; dir=$${dir#/}; [ -n "$$dir" ] || dir=.; \
	  name=$$(echo "$$dir" | tr / _); \
	  if [ -n "$$($(GO) list -f '{{join .TestGoFiles ""}}{{join .XTestGoFiles ""}}' $$p)" ]; then \
	    CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) test -c -trimpath -ldflags='-s -w' -o .gpu/$$name.test $$p; \
	    echo "$$name $$dir" >>.gpu/packages.txt; \
	  fi; \
	done
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags='-s -w' -o .gpu/damacy ./cmd/damacy
	@# gzip keeps .gpu/ (with nvCOMP) under 60 MiB; run.sh unpacks on the GPU host.
	gzip -6 -f .gpu/*.test .gpu/damacy
	@cp .ci/gpu-run.sh .gpu/run.sh && cp .ci/gpu-check.sh .gpu/check.sh && chmod +x .gpu/run.sh .gpu/check.sh
	@du -sh .gpu

# Fetch the pinned nvCOMP wheel and unpack libnvcomp.so.* into .gpu/nvcomp/.
nvcomp-fetch:
	@mkdir -p .gpu/nvcomp .gpu/wheel
	python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
	  -d .gpu/wheel $(NVCOMP_WHEEL)
	cd .gpu/wheel && python3 -c 'import sys,zipfile,glob,os; \
	  z=zipfile.ZipFile(glob.glob("nvidia_libnvcomp_cu13-$(NVCOMP_VERSION)-*.whl")[0]); \
	  [open(os.path.join("../nvcomp", os.path.basename(n)),"wb").write(z.read(n)) for n in z.namelist() \
	   if "/lib64/libnvcomp.so." in n]'
	@rm -rf .gpu/wheel
	@ls -l .gpu/nvcomp

# Build the pinned MinIO for the s3:// tests (a few minutes); a no-op when
# .cache/minio/ already holds it.
minio:
	@if [ "$$(cat $(MINIO_DIR)/VERSION 2>/dev/null)" = "$(MINIO_VERSION)" ] && [ -x $(MINIO_DIR)/minio ]; then \
	  echo "minio $(MINIO_VERSION) in $(MINIO_DIR)"; \
	else \
	  mkdir -p $(MINIO_DIR) && rm -f $(MINIO_DIR)/VERSION && \
	  GOBIN=$(MINIO_DIR) CGO_ENABLED=0 $(GO) install -ldflags='-s -w' github.com/minio/minio@$(MINIO_VERSION) && \
	  echo "$(MINIO_VERSION)" >$(MINIO_DIR)/VERSION; \
	fi

# Build the pinned fake-gcs-server for the gs:// tests (about a minute); a
# no-op when .cache/fake-gcs-server/ already holds it.
fake-gcs:
	@if [ "$$(cat $(FAKE_GCS_DIR)/VERSION 2>/dev/null)" = "$(FAKE_GCS_VERSION)" ] && [ -x $(FAKE_GCS_DIR)/fake-gcs-server ]; then \
	  echo "fake-gcs-server $(FAKE_GCS_VERSION) in $(FAKE_GCS_DIR)"; \
	else \
	  mkdir -p $(FAKE_GCS_DIR) && rm -f $(FAKE_GCS_DIR)/VERSION && \
	  GOBIN=$(FAKE_GCS_DIR) CGO_ENABLED=0 $(GO) install -ldflags='-s -w' github.com/fsouza/fake-gcs-server@$(FAKE_GCS_VERSION) && \
	  echo "$(FAKE_GCS_VERSION)" >$(FAKE_GCS_DIR)/VERSION; \
	fi

# The GET load generator on minio-go (cmd/damacy/peers/getload), into bin/.
# It is a module of its own, so that damacy's module does not depend on
# minio-go.
getload:
	cd cmd/damacy/peers/getload && CGO_ENABLED=0 $(GO) build -trimpath -o $(CURDIR)/bin/getload .

# Vet and test it (make test runs this; its modules come from the proxy).
test-getload:
	cd cmd/damacy/peers/getload && $(GO) vet ./... && $(GO) test -count=1 ./...

# What cmd/damacy/peers/remote_sweep.py needs on a host without Go, in
# .gpu-remote/: damacy, getload and the pinned MinIO for linux/amd64,
# cgo-free and stripped, and nvCOMP when .gpu/nvcomp/ has it (make
# nvcomp-fetch first), each xz-compressed (under 64 MiB in all; the script
# unpacks them).
remote-bins: minio
	@mkdir -p .gpu-remote && rm -f .gpu-remote/*
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags='-s -w' -o .gpu-remote/damacy ./cmd/damacy
	cd cmd/damacy/peers/getload && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags='-s -w' -o $(CURDIR)/.gpu-remote/getload .
	cp $(MINIO_DIR)/minio .gpu-remote/minio
	@if ls .gpu/nvcomp/libnvcomp.so.* >/dev/null 2>&1; then cp .gpu/nvcomp/libnvcomp.so.* .gpu-remote/; \
	  else echo "remote-bins: no .gpu/nvcomp/libnvcomp.so.* (make nvcomp-fetch): the sweep will decode on the CPU"; fi
	xz -6 -T0 -f .gpu-remote/*
	@du -sh .gpu-remote

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

clean:
	rm -rf bin .gpu .gpu-remote

# The Python package (cmd/damacy/python): platform wheels that carry the
# damacy binary (one per architecture, written into dist/), and its tests.
.PHONY: wheel test-python typecheck
PYDIR        := cmd/damacy/python
PYTHON3      ?= python3
WHEEL_ARCHES ?= amd64 arm64
HOST_GOARCH   = $(shell $(GO) env GOARCH)

wheel:
	@for arch in $(WHEEL_ARCHES); do \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags='-s -w' -o build/wheel/$$arch/damacy ./cmd/damacy; \
	  $(PYTHON3) $(PYDIR)/build_wheel.py --binary build/wheel/$$arch/damacy --arch $$arch --out dist; \
	done

# Builds this machine's wheel, installs it into a temporary directory and
# runs the package's tests there against the installed package (not the
# source tree); the end-to-end tests must run, the binary being this tree's.
# Needs a Python with numpy and pytest (DAMACY_PYTHON, which .ci/run
# provides); skips without one unless DAMACY_REQUIRE_PYTHON=1.
test-python:
	@py="$(DAMACY_PYTHON)"; \
	if [ -z "$$py" ] || ! "$$py" -c 'import numpy, pytest' 2>/dev/null; then \
	  if [ "$${DAMACY_REQUIRE_PYTHON:-}" = 1 ]; then echo "test-python: no Python with numpy and pytest (DAMACY_PYTHON)"; exit 1; fi; \
	  echo "test-python: skipped: no Python with numpy and pytest (set DAMACY_PYTHON, or run .ci/run)"; exit 0; \
	fi; \
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o build/wheel/$(HOST_GOARCH)/damacy ./cmd/damacy; \
	whl=$$("$$py" $(PYDIR)/build_wheel.py --binary build/wheel/$(HOST_GOARCH)/damacy --arch $(HOST_GOARCH) --out dist); \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	"$$py" -m pip install -q --disable-pip-version-check --no-deps --no-index --target "$$tmp/site" "$$whl"; \
	cd "$$tmp" && PYTHONPATH="$$tmp/site" PYTHONDONTWRITEBYTECODE=1 DAMACY_TEST_INSTALLED=1 \
	  DAMACY_REQUIRE_SERVE=$${DAMACY_REQUIRE_SERVE:-1} \
	  "$$py" -m pytest -q -rs -p no:cacheprovider "$(CURDIR)/$(PYDIR)/tests"

# Type-checks the Python package and build_wheel.py with the mypy pinned in
# .ci/requirements.txt, under --strict: every function annotated
# (disallow_untyped_defs, disallow_incomplete_defs), every body checked
# (check_untyped_defs), generics with their parameters, no Any returned
# where a type is declared, no unused "type: ignore". As Python 3.10, the
# oldest version mypy 2 checks against (the package runs on 3.9 too).
# Needs a Python with mypy and numpy (whose annotations the package's array
# code is checked against); skips without one unless DAMACY_REQUIRE_PYTHON=1.
typecheck:
	@py="$(DAMACY_PYTHON)"; \
	if [ -z "$$py" ] || ! "$$py" -c 'import mypy, numpy' 2>/dev/null; then \
	  if [ "$${DAMACY_REQUIRE_PYTHON:-}" = 1 ]; then echo "typecheck: no Python with mypy and numpy (DAMACY_PYTHON)"; exit 1; fi; \
	  echo "typecheck: skipped: no Python with mypy and numpy (set DAMACY_PYTHON, or run .ci/run)"; exit 0; \
	fi; \
	cd $(PYDIR) && "$$py" -m mypy --strict --python-version 3.10 --cache-dir "$(CURDIR)/build/mypy" damacy build_wheel.py
