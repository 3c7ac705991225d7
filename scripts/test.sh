#!/usr/bin/env bash
# Install and run the tests from a fresh clone: the system services the tests use
# (each scripts/services.d/*.sh installs and starts one, and may export what the tests
# need to find it), then a virtual environment with the test extras, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
for service in scripts/services.d/*.sh; do
    [ -e "$service" ] || continue
    echo "services: $(basename "$service" .sh)"
    # shellcheck source=/dev/null
    source "$service"
done
python3 -m venv .venv && .venv/bin/pip install -q -e ".[test]" && .venv/bin/pytest -q "$@"
