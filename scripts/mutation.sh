#!/usr/bin/env bash
# scripts/mutation.sh — the command behind `make mutation`: mutation testing
# of the domain packages with gremlins (github.com/go-gremlins/gremlins,
# pinned below), one package at a time, then a table of the figures.
#
# For each mutant (a `<` made `<=`, a `==` made `!=`, a `+` made `-`, …)
# gremlins runs the package's own tests: KILLED if they fail, LIVED if they
# still pass (a rule no test pins), NOT COVERED if no test reaches the line,
# TIMED OUT if the tests ran past the timeout (a mutant that loops; counted
# neither way). Test efficacy = killed / (killed + lived); mutator coverage
# = (killed + lived) / all mutants. docs/design.md ("Mutation testing") says
# how to read them.
#
# Only the fast tests run (build tag "mutation": the fuzz test over miniredis
# and SQLite is left out, see internal/quota/fuzz_test.go). The run is CPU
# heavy (one go test per mutant): one worker, niced, a timeout coefficient
# of 60 (the base is the tests' own run time, ~0.3 s, while each mutant also
# compiles the package: 10 read a loaded machine as mutants that loop). Do
# not add --test-cpu: gremlins v0.6.0 passes "-cpu N" as one argument, no
# test runs and every mutant reads KILLED. From a few seconds a mutant (an
# idle machine) to ten (a loaded one): internal/pools has ~700 mutants.
#
#   MUTATION_PKGS        packages (default: ./internal/quota ./internal/pools)
#   MUTATION_EFFICACY    least test efficacy, percent (default 90)
#   MUTATION_COVERAGE    least mutator coverage, percent (default 85)
#   MUTATION_OUT         where the reports go (default bin/mutation)
#   MUTATION_ARGS        more gremlins flags, e.g. '-E ^controller\.go$' to
#                        leave a file out (a regexp of file names relative
#                        to the package)
#
# Exit status: non-zero when a package misses a threshold or gremlins fails.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GREMLINS_VERSION=v0.6.0
read -r -a pkgs <<<"${MUTATION_PKGS:-./internal/quota ./internal/pools}"
read -r -a extra <<<"${MUTATION_ARGS:-}"
efficacy=${MUTATION_EFFICACY:-90}
coverage=${MUTATION_COVERAGE:-85}
out=${MUTATION_OUT:-bin/mutation}
mkdir -p "$out"

gremlins="$(go env GOPATH)/bin/gremlins"
if ! go version -m "$gremlins" 2>/dev/null | grep -q "github.com/go-gremlins/gremlins[[:space:]]*$GREMLINS_VERSION"; then
	echo "==> go install github.com/go-gremlins/gremlins/cmd/gremlins@$GREMLINS_VERSION"
	go install "github.com/go-gremlins/gremlins/cmd/gremlins@$GREMLINS_VERSION" || exit 1
fi

failed=()
rows=()
for pkg in "${pkgs[@]}"; do
	name=$(basename "$pkg")
	echo "==> gremlins unleash $pkg (reports: $out/$name.txt, $out/$name.json)"
	nice -n 10 "$gremlins" unleash --tags mutation --workers 1 --timeout-coefficient 60 \
		--threshold-efficacy "$efficacy" --threshold-mcover "$coverage" \
		--output "$out/$name.json" "${extra[@]}" "$pkg" 2>&1 | tee "$out/$name.txt" | grep -E 'LIVED|TIMED OUT|NOT COVERED|Killed|efficacy|coverage|error' || true
	rc=${PIPESTATUS[0]}
	summary=$(grep -E '^Killed:' "$out/$name.txt" | tail -1)
	timed=$(grep -E '^Timed out:' "$out/$name.txt" | tail -1 | sed 's/,.*//')
	eff=$(grep -E '^Test efficacy:' "$out/$name.txt" | tail -1 | sed 's/.*: //')
	cov=$(grep -E '^Mutator coverage:' "$out/$name.txt" | tail -1 | sed 's/.*: //')
	rows+=("$(printf '%-18s %-44s %-16s efficacy %-8s coverage %s' "$pkg" "$summary" "$timed" "$eff" "$cov")")
	if ((rc != 0)); then failed+=("$pkg"); fi
done

echo
echo "mutation testing (gremlins $GREMLINS_VERSION; thresholds: efficacy ≥ $efficacy%, coverage ≥ $coverage%)"
printf '  %s\n' "${rows[@]}"
if ((${#failed[@]})); then
	echo "below a threshold (or gremlins failed): ${failed[*]}; the LIVED and NOT COVERED lines above are the rules no test pins" >&2
	exit 1
fi
