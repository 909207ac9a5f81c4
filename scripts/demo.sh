#!/usr/bin/env bash
# Set up this machine (idempotent) and run the stasis demo: an agent session
# that creates a sandbox, runs code, is paused while idle and resumes with its
# state intact. Extra arguments go to `stasis demo` (e.g. --backend process).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
scripts/setup.sh
cargo build --release --locked -p stasis-cli
export STASIS_IMAGES="$REPO/.stasis/images"
exec target/release/stasis demo "$@"
