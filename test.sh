#!/usr/bin/env bash
# The one test command: the Rust workspace's tests (the PostgreSQL backend's
# among them, against a server this script starts), then the Python module's.
#
#   ./test.sh                 everything
#   ./test.sh --python-only   only the Python part (while iterating on python/)
#
# The Python part installs what it needs on a clean machine: a virtual
# environment in target/venv with pinned maturin and pytest, LangGraph and its
# checkpointer packages (the newest: the conformance suite judges the saver
# against the langgraph-checkpoint users install today), the module built
# into it (a debug build, incremental in target/), then pytest over
# python/tests: the module's tests, LangGraph's conformance suite over
# ActumSaver, the crash test's quick mode, and `actum ui` driven in headless
# Chromium (selenium, and Debian's chromium and chromedriver, installed when
# missing). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")"

MATURIN_VERSION=1.16.0
PYTEST_VERSION=9.2.0
SELENIUM_VERSION=4.51.0
VENV=target/venv

# A throw-away PostgreSQL server for the backend's tests (scripts/postgres.sh:
# Debian's postgresql, installed when missing, on a free local port; stopped
# when this script ends). ACTUM_PG_URL set by the caller names its own server.
if [ -z "${ACTUM_PG_URL:-}" ] && [ "${1:-}" != "--python-only" ]; then
    exec scripts/postgres.sh "$0" "$@"
fi

# The engine's scenario tests, once more on PostgreSQL: the same tests, the
# books in a database of the server's instead of a directory (the
# modules of tests/tests/scenarios.rs below open their engines through
# tests/support's `open_fs`, which ACTUM_TEST_BACKEND=postgres points at the
# server).
SCENARIOS_ON_BOTH_BACKENDS=(
    coordination_resources_and_shared_keys effects_exactly_once_across_crashes
    engine_concurrent_commits fencing_and_engine_derived_keys
    large_receipts_go_to_the_blob_store lost_acks_late_facts_and_compensations
    operations_metrics_stuck_and_audit_export operator_moves_runs_between_versions
    operator_pause_resume_cancel operator_retries_and_forks_runs
    queries_list_runs_effects_and_arguments sagas_undo_last_first_across_crashes
    waits_across_a_restart
)

if [ "${1:-}" != "--python-only" ]; then
    # The retention stream's quick length: the files are flat from a tenth
    # of it on (the test's doc has the default 100,000 and its figures).
    ACTUM_RETENTION_RUNS=${ACTUM_RETENTION_RUNS:-50000} cargo test --workspace
    # --workspace, not -p actum-tests: the same feature set as the build
    # above (tokio's features differ for actum-tests alone), so nothing is
    # compiled a second time.
    ACTUM_TEST_BACKEND=postgres cargo test --workspace --test scenarios -- \
        $(printf -- '%s:: ' "${SCENARIOS_ON_BOTH_BACKENDS[@]}")
fi

start=$SECONDS
python=${PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
    echo "test.sh: no $python on this machine; installing Debian's" >&2
    apt-get update -qq && apt-get install -y -qq python3 python3-venv python3-pip >/dev/null
fi
if [ ! -x "$VENV/bin/python" ]; then
    if ! "$python" -m venv "$VENV" 2>/dev/null; then
        # Debian's python3 ships venv separately.
        rm -rf "$VENV"
        apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
        "$python" -m venv "$VENV"
    fi
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    "maturin==${MATURIN_VERSION}" "pytest==${PYTEST_VERSION}" "selenium==${SELENIUM_VERSION}" \
    --upgrade langgraph langgraph-checkpoint langgraph-checkpoint-sqlite \
    langgraph-checkpoint-conformance
"$VENV/bin/python" -m pip list --disable-pip-version-check 2>/dev/null |
    grep -E '^langgraph' | sed 's/^/test.sh: /' >&2
# The browser test drives `actum ui` in Debian's headless Chromium with
# Selenium, through Debian's chromedriver, and runs the `actum` binary:
# the one `cargo test --workspace` built, or, with --python-only, built here.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    echo "test.sh: no chromium or chromedriver on this machine; installing Debian's" >&2
    apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null
fi
if [ "${1:-}" = "--python-only" ]; then
    cargo build --quiet -p actum-cli
fi
export ACTUM_BIN="$PWD/target/debug/actum"
# maturin develop builds the module (the crate at python/, with the
# extension-module feature pyproject.toml names) and installs it into the
# environment VIRTUAL_ENV names.
(cd python && VIRTUAL_ENV="$PWD/../$VENV" "../$VENV/bin/maturin" develop --quiet)
"$VENV/bin/python" -m pytest -q python/tests
echo "python tests: $((SECONDS - start)) s"
