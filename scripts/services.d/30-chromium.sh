# Chromium for the dashboard's browser tests (tests/test_dashboard_browser.py), from
# Debian's packages; Playwright (the `test` extra) drives it at /usr/bin/chromium.
# Idempotent: does nothing when chromium is already installed.
if ! command -v chromium >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q chromium fonts-dejavu-core >/dev/null
fi
export TENSORTUNE_CHROMIUM="${TENSORTUNE_CHROMIUM:-$(command -v chromium)}"
