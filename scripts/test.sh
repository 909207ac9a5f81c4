#!/usr/bin/env bash
# Set up this machine (idempotent) and run every test: unit tests, the
# backends against the real kernel/QEMU, the daemon end to end, the store
# against a real S3-compatible server. Needs root (namespaces, cgroups).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
scripts/setup.sh --tests
export STASIS_IMAGE_DIR="$REPO/.stasis/images/default"
export STASIS_REQUIRE_S3=1
cargo build --locked --workspace --all-targets
# A bounded run of the lifecycle bench: it exercises the bench command and
# prints this machine's figures into the CI log.
target/debug/stasis bench lifecycle --backend process --repeats 1 --fork 2 --paused-watch-secs 1
cargo test --locked --workspace
