#!/usr/bin/env bash
# scripts/lint.sh — the command behind `make lint`: every linter and checker
# of the project in one pass, each named as it runs, a summary at the end.
#
#   Go:          gofmt, go vet, staticcheck, golangci-lint (.golangci.yml), on
#                the service, the api module (OpenAPI file, Go SDK) and
#                deploy/checks
#   Prometheus:  promtool check rules, test rules, check config, and check
#                metrics on a live /metrics (a dev-mode server started here)
#   OpenAPI:     Redocly's linter, pinned in tools/openapi-lint
#   Deploy:      deploy/checks: the dashboard under grafana/dashboard-linter's
#                strict rules, kustomize builds decoded strictly into
#                k8s.io/api types, the PrometheusRule in sync with alerts.yml,
#                docker-compose.yml through compose v2's loader
#
# A tool that is not installed is named with how to install it, and fails
# the run (bash .ci/run installs them all); QC_LINT_SKIP_MISSING=1 runs what
# is there and only warns.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

failed=() missing=() ran=0
step() { printf '\n==> %s\n' "$*"; }
# check NAME CMD...: runs CMD, records NAME when it fails.
check() {
	local name=$1
	shift
	step "$name: $*"
	ran=$((ran + 1))
	if "$@"; then echo "ok"; else failed+=("$name"); fi
}
# have TOOL HOW: is TOOL on PATH? If not, records it with how to install it.
have() {
	command -v "$1" >/dev/null 2>&1 && return 0
	missing+=("$1 — $2")
	step "$1: NOT INSTALLED ($2)"
	return 1
}

gofmt_clean() {
	local out
	out=$(gofmt -l .)
	[[ -z $out ]] || { echo "not gofmt-ed (run make fmt):"; echo "$out"; return 1; }
}
# Every package under internal/ says its role in a doc.go (the house rule),
# and that file holds its package comment.
doc_go_each() {
	local d bad=0
	for d in internal/*/; do
		if [[ ! -f ${d}doc.go ]] || ! grep -q '^// Package ' "${d}doc.go"; then
			echo "no doc.go with a package comment: $d"
			bad=1
		fi
	done
	return "$bad"
}
# No git-tracked .go file is longer than 500 lines (the house rule): split
# one by topic (a test file) or responsibility (a production file). Generated
# files (Go's "// Code generated ... DO NOT EDIT." line in their header, e.g.
# internal/contract/apiclient/client.gen.go) are nobody's to split.
go_files_short() {
	local f n bad=0
	while IFS= read -r -d '' f; do
		[[ -f $f ]] || continue
		if head -n 20 "$f" | grep -Eq '^// Code generated .* DO NOT EDIT\.$'; then
			continue
		fi
		n=$(wc -l <"$f")
		if ((n > 500)); then
			echo "over 500 lines ($n): $f"
			bad=1
		fi
	done < <(git ls-files -z -- '*.go')
	return "$bad"
}
in_checks() { (cd deploy/checks && "$@"); }
in_api() { (cd api && "$@"); }

check "gofmt" gofmt_clean
check "doc.go in every internal package" doc_go_each
check "no .go file over 500 lines" go_files_short
check "go vet" go vet ./...
check "go vet (api)" in_api go vet ./...
check "go vet (deploy/checks)" in_checks go vet ./...

GOBIN_DIR=$(go env GOPATH)/bin
export PATH="$PATH:$GOBIN_DIR"
if have staticcheck "go install honnef.co/go/tools/cmd/staticcheck@v0.8.2"; then
	check "staticcheck" staticcheck ./...
	check "staticcheck (api)" in_api staticcheck ./...
	check "staticcheck (deploy/checks)" in_checks staticcheck ./...
fi
if have golangci-lint "go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0"; then
	# --allow-parallel-runners: another golangci-lint on the machine (another
	# checkout's make lint) would otherwise fail this run at once.
	gl() { golangci-lint run --allow-parallel-runners "$@"; }
	check "golangci-lint" gl ./...
	check "golangci-lint (api)" in_api gl --config ../.golangci.yml ./...
	check "golangci-lint (deploy/checks)" in_checks gl --config ../../.golangci.yml ./...
fi

if have promtool "apt-get install prometheus (Debian's package brings promtool)"; then
	check "promtool check rules" promtool check rules deploy/prometheus/alerts.yml
	check "promtool test rules" promtool test rules deploy/prometheus/alerts_test.yml
	check "promtool check config" promtool check config deploy/prometheus/prometheus.yml
	check "promtool check metrics (live /metrics)" bash scripts/live-metrics.sh
fi

redocly=tools/openapi-lint/node_modules/.bin/redocly
# No usage telemetry or update check: CI reaches no network but the registries.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
if [[ -x $redocly ]]; then
	check "redocly lint" "$redocly" lint --format=stylish api/openapi.yaml
else
	missing+=("redocly — npm ci --prefix tools/openapi-lint (pinned @redocly/cli)")
	step "redocly: NOT INSTALLED (npm ci --prefix tools/openapi-lint)"
fi

check "deploy checks (dashboard rules, manifests, compose, PrometheusRule)" \
	in_checks go test -count=1 -run 'Dashboard|Kustomization|Pinned|Compose|PrometheusRule' ./...

echo
echo '------------------------------------------------------------------------'
echo "make lint: $ran checks run, ${#failed[@]} failed, ${#missing[@]} tools missing"
for f in "${failed[@]}"; do echo "  FAILED:  $f"; done
for m in "${missing[@]}"; do echo "  MISSING: $m"; done
echo '------------------------------------------------------------------------'
((${#failed[@]} == 0)) || exit 1
if ((${#missing[@]})); then
	if [[ ${QC_LINT_SKIP_MISSING:-0} == 1 ]]; then
		echo "QC_LINT_SKIP_MISSING=1: missing tools only warned about"
	else
		echo "install the missing tools (bash .ci/run does), or QC_LINT_SKIP_MISSING=1 to run without them" >&2
		exit 1
	fi
fi
