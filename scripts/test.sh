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
export STASIS_IMAGE_DIR="$REPO/.stasis/images/default"
export STASIS_REQUIRE_S3=1
# A throwaway PostgreSQL cluster on loopback for the metadata and multi-node tests.
read -r STASIS_TEST_PG_URL PG_DIR < <(scripts/pg-test-server.sh start)
export STASIS_TEST_PG_URL STASIS_REQUIRE_PG=1
trap 'scripts/pg-test-server.sh stop "$PG_DIR"' EXIT
cargo build --locked --workspace --all-targets
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
# name the test that hung.
timeout --kill-after=60 "${STASIS_TEST_TIMEOUT:-50m}" \
    cargo test --locked --workspace --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
hung=0
if ((status == 124 || status == 137)); then
    echo "test: cargo test did not finish within ${STASIS_TEST_TIMEOUT:-50m}; the test binary that was running is above" >&2
    hung=1
fi
sum() { { grep -E '^test result:' "$log" || true; } | { grep -oE "[0-9]+ $1" || true; } | awk '{s+=$1} END {print s+0}'; }
passed=$(($(sum passed) + install_passed))
failed=$(($(sum failed) + install_failed + hung))
((install_failed == 0)) || ((status != 0)) || status=1
# The web console in headless Chromium (tests/console: Selenium driving
# Debian's chromium against the daemon built above); counts join the total.
set +e
STASIS_BIN="$REPO/target/debug/stasis" timeout --kill-after=30 "${STASIS_CONSOLE_TIMEOUT:-8m}" \
    "$REPO/.venv/bin/python" -m pytest tests/console -q -p no:cacheprovider 2>&1 | tee "$log"
cstatus=${PIPESTATUS[0]}
set -e
cline=$({ grep -E '[0-9]+ (passed|failed|error)' "$log" || true; } | tail -1)
ccount() { { grep -oE "[0-9]+ $1" <<<"$cline" || true; } | awk '{s+=$1} END {print s+0}'; }
passed=$((passed + $(ccount passed)))
failed=$((failed + $(ccount failed) + $(ccount error)))
if ((status == 0 && cstatus != 0)); then
    status=$cstatus
    ((failed > 0)) || failed=1
fi
# The Python client's tests (pytest) against the daemon built above; their
# counts join the total.
set +e
STASIS_BIN="$REPO/target/debug/stasis" timeout --kill-after=30 "${STASIS_PYTEST_TIMEOUT:-15m}" \
    "$REPO/.venv/bin/python" -m pytest \
    clients/python/tests -q -p no:cacheprovider 2>&1 | tee "$log"
pystatus=${PIPESTATUS[0]}
set -e
pyline=$({ grep -E '[0-9]+ (passed|failed|error)' "$log" || true; } | tail -1)
pycount() { { grep -oE "[0-9]+ $1" <<<"$pyline" || true; } | awk '{s+=$1} END {print s+0}'; }
passed=$((passed + $(pycount passed)))
failed=$((failed + $(pycount failed) + $(pycount error)))
if ((status == 0 && pystatus != 0)); then
    status=$pystatus
    ((failed > 0)) || failed=1
fi
# The code interpreter's server against a real Jupyter kernel (no sandbox),
# its stream parsed by the E2B SDK's own parser; counts join the total.
set +e
timeout --kill-after=30 "${STASIS_CODE_INTERPRETER_TIMEOUT:-5m}" \
    "$REPO/.venv/bin/python" -m pytest images/code-interpreter/tests -q -p no:cacheprovider 2>&1 | tee "$log"
cistatus=${PIPESTATUS[0]}
set -e
ciline=$({ grep -E '[0-9]+ (passed|failed|error)' "$log" || true; } | tail -1)
cicount() { { grep -oE "[0-9]+ $1" <<<"$ciline" || true; } | awk '{s+=$1} END {print s+0}'; }
passed=$((passed + $(cicount passed)))
failed=$((failed + $(cicount failed) + $(cicount error)))
if ((status == 0 && cistatus != 0)); then
    status=$cistatus
    ((failed > 0)) || failed=1
fi
# The Agents SDK's own pause/resume integration test against the stasis
# provider, on both backends (clients/python/sdk_suite); its counts join too.
set +e
STASIS_BIN="$REPO/target/debug/stasis" timeout --kill-after=30 "${STASIS_SDK_SUITE_TIMEOUT:-10m}" \
    "$REPO/.venv/bin/python" clients/python/sdk_suite/run.py --backend all 2>&1 | tee "$log"
sdkstatus=${PIPESTATUS[0]}
set -e
sdkline=$({ grep -E '^sdk-suite: [0-9]+ passed' "$log" || true; } | tail -1)
sdkcount() { { grep -oE "[0-9]+ $1" <<<"$sdkline" || true; } | awk '{s+=$1} END {print s+0}'; }
passed=$((passed + $(sdkcount passed)))
failed=$((failed + $(sdkcount failed)))
if ((sdkstatus != 0)); then
    [[ -n "$sdkline" ]] || failed=$((failed + 1))
    ((status != 0)) || status=$sdkstatus
fi
# The Agents SDK's generic sandbox tests, ported onto the stasis provider
# (clients/python/sdk_suite/ported; one sandbox per backend); counts join.
set +e
STASIS_BIN="$REPO/target/debug/stasis" timeout --kill-after=30 "${STASIS_SDK_PORTED_TIMEOUT:-10m}" \
    "$REPO/.venv/bin/python" -m pytest clients/python/sdk_suite/ported -q -p no:cacheprovider 2>&1 | tee "$log"
portedstatus=${PIPESTATUS[0]}
set -e
pline=$({ grep -E '[0-9]+ (passed|failed|error)' "$log" || true; } | tail -1)
pcount() { { grep -oE "[0-9]+ $1" <<<"$pline" || true; } | awk '{s+=$1} END {print s+0}'; }
passed=$((passed + $(pcount passed)))
failed=$((failed + $(pcount failed) + $(pcount error)))
if ((status == 0 && portedstatus != 0)); then
    status=$portedstatus
    ((failed > 0)) || failed=1
fi
# The TypeScript client's tests (node --test, both backends) against the
# same daemon binary; their counts join the total.
set +e
STASIS_BIN="$REPO/target/debug/stasis" timeout --kill-after=30 "${STASIS_NPM_TEST_TIMEOUT:-15m}" \
    npm --prefix clients/typescript test 2>&1 | tee "$log"
tsstatus=${PIPESTATUS[0]}
set -e
tscount() { { grep -E "^# $1 [0-9]+" "$log" || true; } | awk '{s+=$3} END {print s+0}'; }
passed=$((passed + $(tscount pass)))
failed=$((failed + $(tscount fail) + $(tscount cancelled)))
if ((status == 0 && tsstatus != 0)); then
    status=$tsstatus
    ((failed > 0)) || failed=1
fi
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
