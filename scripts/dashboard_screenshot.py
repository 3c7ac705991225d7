"""Take the screenshot of `tensortune dashboard` shown in docs/dashboard.md.

    python scripts/dashboard_screenshot.py [--db RECORDS] [-o docs/images/dashboard.png]

Without --db it first tunes the tests' small C kernel for real (tests/dashboard_tuning.py, about a
minute) into a temporary database. Then it starts `tensortune dashboard` on a free port, opens the
kernel's page in Debian's chromium through Playwright and saves a full-page PNG.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="records database (default: tune into a temporary one)")
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "docs" / "images" / "dashboard.png")
    parser.add_argument("--chromium", default=os.environ.get("TENSORTUNE_CHROMIUM", "/usr/bin/chromium"))
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db
        if db is None:
            db = Path(tmp) / "records.db"
            subprocess.run([sys.executable, str(ROOT / "tests" / "dashboard_tuning.py"), str(db), "3"], check=True,
                           env={**env, "TENSORTUNE_PROGRESS": "0"})
        server = subprocess.Popen([sys.executable, "-m", "tensortune.cli.main", "dashboard", "--db", str(db),
                                   "--port", "0"], stdout=subprocess.PIPE, text=True, env=env)
        try:
            url = re.search(r"http://\S+/", server.stdout.readline()).group(0)
            shoot(url, args.chromium, args.output)
        finally:
            server.terminate()
            server.wait()
    print(f"wrote {args.output}")


def shoot(url: str, chromium: str, output: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900}, device_scale_factor=1)
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']")
        page.locator("[data-testid=workload-link]").first.click()
        page.wait_for_selector("[data-testid=target]")
        output.parent.mkdir(parents=True, exist_ok=True)
        # the comparison and the first target: what a reader needs to recognise the page
        first = page.locator("[data-testid=target]").first.bounding_box()
        page.screenshot(path=str(output), full_page=True, clip={"x": 0, "y": 0, "width": 1200, "height": first["y"] + first["height"]})
        browser.close()


if __name__ == "__main__":
    main()
