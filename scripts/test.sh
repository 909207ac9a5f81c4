#!/usr/bin/env bash
# Set up this machine (idempotent) and run every test: unit tests, the
# backends against the real kernel/QEMU, the daemon end to end, the store
# against a real S3-compatible server. Needs root (namespaces, cgroups).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
# One build per run: the incremental cache would only cost disk.
export CARGO_INCREMENTAL=0
# The build, the guest image and the tests' sandboxes need a few GB; say how
# much there is so a full disk is recognised as such in the log.
echo "test: $(df -h --output=avail "$REPO" | tail -1 | tr -d ' ') free on the repository's disk" >&2
# Set-up itself is tested first: from each starting point of the QEMU
# packages (none, bookworm's 7.2, the base image's lone qemu-utils 10, a mix)
# setup must leave one version across the family. It ends in setup's state.
set +e
install_log=$(scripts/check-install.sh)
install_status=$?
set -e
echo "$install_log"
install_passed=$(grep -c ': ok in ' <<<"$install_log" || true)
install_failed=$(grep -c ': FAILED' <<<"$install_log" || true)
((install_status == 0)) || ((install_failed > 0)) || install_failed=1
scripts/setup.sh --tests
echo "test: install checks and setup took $SECONDS s" >&2
export STASIS_IMAGE_DIR="$REPO/.stasis/images/default"
export STASIS_REQUIRE_S3=1
# The tests that install from PyPI through a sandbox's egress allowlist (the
# base image's pip, the E2B agent loop) run: this machine reaches PyPI.
export STASIS_TEST_PYPI=1
# A throwaway PostgreSQL cluster on loopback for the metadata and multi-node tests.
read -r STASIS_TEST_PG_URL PG_DIR < <(scripts/pg-test-server.sh start)
export STASIS_TEST_PG_URL STASIS_REQUIRE_PG=1
trap 'scripts/pg-test-server.sh stop "$PG_DIR"' EXIT
build_start=$SECONDS
cargo build --locked --workspace --all-targets
echo "test: build took $((SECONDS - build_start)) s" >&2
# A bounded run of the lifecycle bench: it exercises the bench command and
# prints this machine's figures into the CI log.
target/debug/stasis bench lifecycle --backend process --repeats 1 --fork 2 --paused-watch-secs 1
# cargo prints one summary per test binary (the last ones are empty doc-test
# runs); end with one total line.
log=$(mktemp)
set +e
# A hung test must fail the run, not eat CI's time: the whole cargo test is
# bounded (its process group is killed at the limit) and the hang is counted
# as a failure. The long microVM tests also carry their own watchdogs, which
# name the test that hung. STASIS_CARGO_LANES=1 runs the test binaries in
# two lanes instead (scripts/cargo-test-lanes.py: the microVM ones beside
# the others; ~4 min shorter here, but three microVM guests at once on two
# cores have let a jailed QEMU miss its 30 s start report, so CI keeps one
# lane).
export STASIS_TEST_TIMEOUT=${STASIS_TEST_TIMEOUT:-50m}
if [[ ${STASIS_CARGO_LANES:-0} == 1 ]]; then
    lanes_dir=$(mktemp -d)
    timeout --kill-after=60 60m python3 scripts/cargo-test-lanes.py "$lanes_dir" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    rm -rf "$lanes_dir"
else
    timeout --kill-after=60 "$STASIS_TEST_TIMEOUT" \
        cargo test --locked --workspace --no-fail-fast 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
fi
set -e
echo "test: cargo test took $((SECONDS - build_start)) s since the build began" >&2
hung=0
if ((status == 124 || status == 137)); then
    echo "test: cargo test did not finish within $STASIS_TEST_TIMEOUT; the test binary that was running is named above" >&2
    hung=1
fi
sum() { { grep -E '^test result:' "$log" || true; } | { grep -oE "[0-9]+ $1" || true; } | awk '{s+=$1} END {print s+0}'; }
passed=$(($(sum passed) + install_passed))
failed=$(($(sum failed) + install_failed + hung))
((install_failed == 0)) || ((status != 0)) || status=1
# Each suite below runs against the daemon binary built above, bounded by
# its own timeout, and its counts join the total. The suites run in two
# lanes at once (each suite starts its own daemons on ports of its own; the
# suites wait on sandboxes more than they compute, so two lanes roughly halve
# the phase on two cores); a lane runs its suites one after another, so the
# two microVM-heavy suites of a lane never overlap each other. Each suite's
# output is kept apart and printed whole once both lanes are done.
# Each suite has a count STYLE: how its runner prints its counts
# (pytest's summary line, node's TAP `# pass N`, vitest's `Tests N passed`,
# or the SDK runner's `sdk-suite: N passed`). A runner that fails without
# printing a count counts one failure.
phase_start=$SECONDS
phase() { echo "test: $1 took $((SECONDS - phase_start)) s" >&2; phase_start=$SECONDS; }
suites_dir=$(mktemp -d)
suite_order=()
# `suite NAME LIMIT CMD...`: run one suite into $suites_dir/NAME.{log,rc,secs}
# (in a lane's subshell).
suite() {
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    set +e
    STASIS_BIN="$REPO/target/debug/stasis" timeout --kill-after=30 "$limit" "$@" >"$suites_dir/$name.log" 2>&1
    echo $? >"$suites_dir/$name.rc"
    set -e
    echo $((SECONDS - t0)) >"$suites_dir/$name.secs"
    echo "test: $name finished (exit $(cat "$suites_dir/$name.rc")) after $((SECONDS - t0)) s" >&2
}
# Fold one finished suite's counts into the total.
tally() {
    local name=$1 style=$2 limit=$3
    local slog="$suites_dir/$name.log"
    cat "$slog"
    local st line p=0 f=0
    st=$(cat "$suites_dir/$name.rc" 2>/dev/null || echo 1)
    case $style in
        pytest)
            line=$({ grep -E '[0-9]+ (passed|failed|error)' "$slog" || true; } | tail -1)
            p=$({ grep -oE '[0-9]+ passed' <<<"$line" || true; } | awk '{s+=$1} END {print s+0}')
            f=$({ grep -oE '[0-9]+ (failed|error)' <<<"$line" || true; } | awk '{s+=$1} END {print s+0}')
            ;;
        tap)
            line=$({ grep -E '^# (pass|fail) [0-9]+' "$slog" || true; } | tail -1)
            p=$({ grep -E '^# pass [0-9]+' "$slog" || true; } | awk '{s+=$3} END {print s+0}')
            f=$({ grep -E '^# (fail|cancelled) [0-9]+' "$slog" || true; } | awk '{s+=$3} END {print s+0}')
            ;;
        vitest)
            line=$({ grep -E 'Tests +[0-9]+ (passed|failed)' "$slog" || true; } | tail -1)
            p=$({ grep -oE '[0-9]+ passed' <<<"$line" || true; } | awk '{s+=$1} END {print s+0}')
            f=$({ grep -oE '[0-9]+ failed' <<<"$line" || true; } | awk '{s+=$1} END {print s+0}')
            ;;
        sdk)
            line=$({ grep -E '^sdk-suite: [0-9]+ passed' "$slog" || true; } | tail -1)
            p=$({ grep -oE '[0-9]+ passed' <<<"$line" || true; } | awk '{s+=$1} END {print s+0}')
            f=$({ grep -oE '[0-9]+ failed' <<<"$line" || true; } | awk '{s+=$1} END {print s+0}')
            ;;
    esac
    passed=$((passed + p))
    failed=$((failed + f))
    if ((st != 0)); then
        if ((st == 124 || st == 137)); then
            echo "test: $name did not finish within $limit" >&2
        fi
        echo "test: $name exited $st ($p passed, $f failed counted)" >&2
        ((f > 0)) || failed=$((failed + 1))
        ((status != 0)) || status=$st
    fi
    echo "test: $name took $(cat "$suites_dir/$name.secs" 2>/dev/null || echo '?') s" >&2
}
declare -A suite_style suite_limit
plan() { suite_order+=("$1"); suite_style[$1]=$2; suite_limit[$1]=$3; }
# The lanes' plan: name, count style, time limit (the commands are below).
plan e2b-js-process vitest "${STASIS_E2B_JS_TIMEOUT:-15m}"
plan e2b-python-microvm pytest "${STASIS_E2B_PY_MICROVM_TIMEOUT:-8m}"
plan agents-sdk-ported-python pytest "${STASIS_SDK_PORTED_TIMEOUT:-10m}"
plan console pytest "${STASIS_CONSOLE_TIMEOUT:-8m}"
plan code-interpreter pytest "${STASIS_CODE_INTERPRETER_TIMEOUT:-5m}"
plan e2b-python-process pytest "${STASIS_E2B_PY_TIMEOUT:-15m}"
plan e2b-js-microvm vitest "${STASIS_E2B_JS_MICROVM_TIMEOUT:-8m}"
plan typescript-client tap "${STASIS_NPM_TEST_TIMEOUT:-15m}"
plan python-client pytest "${STASIS_PYTEST_TIMEOUT:-15m}"
plan agents-sdk-integration sdk "${STASIS_SDK_SUITE_TIMEOUT:-10m}"
plan agents-sdk-ported-typescript tap "${STASIS_TS_SDK_SUITE_TIMEOUT:-15m}"
run() { suite "$1" "${suite_limit[$1]}" "${@:2}"; }
lane_a() {
    # The E2B JavaScript SDK's own tests, ported (clients/e2b/js): the whole
    # suite on the process backend.
    run e2b-js-process env NO_COLOR=1 npm --prefix clients/e2b/js test
    # The E2B Python SDK's own tests, ported (clients/e2b/python): the tests
    # marked `microvm` on the microVM backend.
    run e2b-python-microvm env STASIS_E2B_BACKEND=microvm "$REPO/.venv/bin/python" -m pytest \
        -c clients/e2b/python/pytest.ini clients/e2b/python/tests -q
    # The Agents SDK's generic sandbox tests, ported onto the stasis provider
    # (clients/python/sdk_suite/ported; one sandbox per backend).
    run agents-sdk-ported-python "$REPO/.venv/bin/python" -m pytest clients/python/sdk_suite/ported -q -p no:cacheprovider
    # The web console in headless Chromium (tests/console: Selenium driving
    # Debian's chromium).
    run console "$REPO/.venv/bin/python" -m pytest tests/console -q -p no:cacheprovider
    # The code interpreter's server against a real Jupyter kernel (no
    # sandbox), its stream parsed by the E2B SDK's own parser.
    run code-interpreter "$REPO/.venv/bin/python" -m pytest images/code-interpreter/tests -q -p no:cacheprovider
}
lane_b() {
    # The E2B Python SDK's own tests, ported: everything on the process backend.
    run e2b-python-process env STASIS_E2B_BACKEND=process "$REPO/.venv/bin/python" -m pytest \
        -c clients/e2b/python/pytest.ini clients/e2b/python/tests -q
    # The E2B JavaScript SDK's tests on the microVM backend: a bounded part.
    run e2b-js-microvm env NO_COLOR=1 STASIS_E2B_BACKEND=microvm npm --prefix clients/e2b/js test -- \
        tests/sandbox/commands/run.test.ts tests/sandbox/snapshot.test.ts
    # The TypeScript client's tests (node --test, both backends).
    run typescript-client npm --prefix clients/typescript test
    # The Python client's tests.
    run python-client "$REPO/.venv/bin/python" -m pytest clients/python/tests -q -p no:cacheprovider
    # The Agents SDK's own pause/resume integration test against the stasis
    # provider, on both backends (clients/python/sdk_suite).
    run agents-sdk-integration "$REPO/.venv/bin/python" clients/python/sdk_suite/run.py --backend all
    # The Agents SDK's own sandbox tests, ported onto the TypeScript provider
    # (clients/typescript/sdk_suite: vitest, one daemon per backend, microVM
    # on a bounded subset unless STASIS_TS_TESTS_FULL=1); run.mjs prints
    # "# pass N" / "# fail N" per backend.
    run agents-sdk-ported-typescript npm --prefix clients/typescript run sdk-suite
}
lane_a &
lane_a_pid=$!
lane_b &
lane_b_pid=$!
wait "$lane_a_pid" || true
wait "$lane_b_pid" || true
for name in "${suite_order[@]}"; do
    tally "$name" "${suite_style[$name]}" "${suite_limit[$name]}"
done
rm -rf "$suites_dir"
phase "the suites (two lanes)"
rm -f "$log"
# The source layout counts as one test: no Rust file over 850 lines, no import
# circle between a crate's modules (scripts/layout-allow.txt names the known
# exceptions; the circles it names are reported without failing the run).
if python3 scripts/check-layout.py --circles-report-only; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
    ((status != 0)) || status=1
fi
# The Kubernetes manifests render (Debian's kubectl) and validate offline
# against the API schemas and a stasis node's rules: one test.
if scripts/check-kubernetes.sh; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
    ((status != 0)) || status=1
fi
# The book (docs/): it builds with the mdbook setup installed, and every
# internal link and anchor of the built pages resolves (external links are
# not fetched); each counts as one test. The API chapter's freshness against
# /openapi.json and the quickstart's commands are cargo tests above
# (crates/cli/tests/docs_book.rs).
if target/tools/bin/mdbook build docs; then
    passed=$((passed + 1))
else
    echo "test: mdbook build docs failed" >&2
    failed=$((failed + 1))
    ((status != 0)) || status=1
fi
if python3 scripts/check-book-links.py --self-test && python3 scripts/check-book-links.py docs/book; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
    ((status != 0)) || status=1
fi
echo "tests: $passed passed, $failed failed"
exit "$status"
