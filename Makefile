# quota-center — build, test and run targets.
# `make` alone lists the targets. Every recipe runs in bash with -eu -o pipefail,
# so the first failing command stops the target with a non-zero exit.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
MAKEFLAGS += --no-builtin-rules --no-print-directory

GO      ?= go
BIN     := bin
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
IMAGE   ?= quota-center:$(VERSION)

# say prints what a target is about to do.
say = @printf '==> %s\n'

.PHONY: help build run test bench soak lint mutation fmt migrate demo docker ci clean k8s-rules

help: ## List the targets (this text)
	@echo 'quota-center — make targets:'
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-8s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo
	@echo 'Start here: make run (dev mode, no backends needed) and make test.'

build: ## Build bin/quota-center and bin/qc-replay (version from git describe; with dev mode: the image builds -tags nodev)
	$(say) "go build -trimpath $(BIN)/quota-center $(BIN)/qc-replay (version $(VERSION))"
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/quota-center ./cmd/quota-center
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/qc-replay ./cmd/qc-replay

run: ## Run the server; dev mode (in-process Redis + SQLite) when QC_REDIS_ADDR and QC_MYSQL_DSN are unset
	$(say) "go run ./cmd/quota-center serve (dev mode unless QC_REDIS_ADDR and QC_MYSQL_DSN are set)"
	$(GO) run -ldflags '$(LDFLAGS)' ./cmd/quota-center serve

test: ## Run every Go test with -race (scripts/test.sh; real Redis/MariaDB suites skip when absent)
	$(say) "bash scripts/test.sh"
	bash scripts/test.sh

bench: ## Load benchmark vs the baseline server on the real Redis and MariaDB; writes docs/performance.md (~30 min)
	$(say) "bash scripts/bench.sh"
	bash scripts/bench.sh

soak: ## Soak run with backend faults on private Redis/MariaDB, then invariant checks (60 s by default)
	$(say) "bash scripts/soak.sh"
	bash scripts/soak.sh

lint: ## Every linter: gofmt, vet, staticcheck, golangci-lint, promtool (rules, tests, config, live metrics), redocly, deploy checks
	$(say) "bash scripts/lint.sh"
	bash scripts/lint.sh

mutation: ## Mutation testing of internal/quota and internal/pools with gremlins (scripts/mutation.sh; not in make test, 10-60 min a package)
	$(say) "bash scripts/mutation.sh"
	bash scripts/mutation.sh

k8s-rules: ## Write deploy/k8s/monitoring/prometheusrule.yaml from deploy/prometheus/alerts.yml
	$(say) "deploy/checks/cmd/k8s-rules (alerts.yml -> PrometheusRule)"
	cd deploy/checks && $(GO) run ./cmd/k8s-rules ../..

fmt: ## Format every Go file with gofmt
	$(say) "gofmt -w on every Go file"
	gofmt -w .

migrate: ## Apply the ledger migrations to QC_MYSQL_DSN
	@if [[ -z "$${QC_MYSQL_DSN:-}" ]]; then \
		echo "make migrate: set QC_MYSQL_DSN, e.g. QC_MYSQL_DSN='root@tcp(127.0.0.1:3306)/quota_center' make migrate" >&2; \
		exit 1; \
	fi
	$(say) "go run ./cmd/quota-center migrate (QC_MYSQL_DSN from the environment)"
	$(GO) run -ldflags '$(LDFLAGS)' ./cmd/quota-center migrate

demo: ## Start a server and replay the Azure LLM trace through it (scripts/demo.sh)
	$(say) "bash scripts/demo.sh"
	bash scripts/demo.sh

docker: ## Build the container image quota-center:<version> (IMAGE= to override)
	$(say) "docker build -t $(IMAGE)"
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

ci: ## What CI runs: start Redis and MariaDB if needed, make test with no skips, then make lint (.ci/run)
	$(say) "bash .ci/run"
	bash .ci/run

clean: ## Remove bin/
	$(say) "rm -rf $(BIN)"
	rm -rf $(BIN)
