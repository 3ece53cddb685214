"""`actum ui` in a real browser: headless Chromium, driven by Selenium, opens
the page with the token the command printed, finds a run waiting for an
approval, opens its story, fills in the operator's name and reason, clicks
Approve, and the books (read by `actum show --json`) say the wait was
approved by that operator. It saves a screenshot of the run's page under
target/ (docs/ui-run.png is a copy of one).

It uses the `actum` binary the test command built (ACTUM_BIN, else
target/debug/actum) and Debian's chromium and chromedriver, which test.sh
installs when they are missing.
"""

import json
import os
import pathlib
import shutil
import subprocess

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait

import actum

ROOT = pathlib.Path(__file__).resolve().parents[2]
ACTUM = pathlib.Path(os.environ.get("ACTUM_BIN", ROOT / "target" / "debug" / "actum"))
SCREENSHOT = ROOT / "target" / "ui-run.png"


def make_db(path):
    """A database whose run `refund-7` made a model call and a charge, then
    waits for finance to approve the refund."""
    with actum.Engine.open(path) as engine:
        runtime = actum.Runtime(engine)
        charge = actum.Tool.idempotent("psp.charge", window_ms=86_400_000)

        @runtime.agent("refund", version="2")
        def refund(ctx):
            plan = ctx.decide("plan", ctx.input, lambda: b"refund 120 EUR")
            ctx.step("hold", charge, plan, lambda call: b"hold " + call.idempotency_key.encode())
            ctx.approval("approve", plan, "finance", 3_600_000)
            return b"refunded"

        for run in ["refund-6", "refund-7"]:
            runtime.start("refund", run, b"order 17: 120 EUR")
        worked = runtime.drain()
        assert {(w.run_id, w.outcome) for w in worked} == {
            ("refund-6", "parked"),
            ("refund-7", "parked"),
        }


@pytest.fixture
def ui(tmp_path):
    """`actum ui` on a fresh database, on a free port: (dir, url)."""
    assert ACTUM.exists(), f"{ACTUM} is missing: build it first (cargo build -p actum-cli)"
    db = tmp_path / "db"
    make_db(db)
    server = subprocess.Popen(
        [str(ACTUM), "ui", str(db), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stdout.readline()
        url = line.split()[-1]
        assert "/?token=" in url, line
        yield db, url
    finally:
        server.kill()
        server.wait()


@pytest.fixture
def browser():
    chromium = shutil.which("chromium")
    driver_path = shutil.which("chromedriver")
    assert chromium and driver_path, "install chromium and chromium-driver (test.sh does)"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1200"]:
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    try:
        yield driver
    finally:
        driver.quit()


def show(db, run):
    out = subprocess.run([str(ACTUM), "show", str(db), run, "--json"], check=True, capture_output=True)
    return json.loads(out.stdout)


def test_an_operator_approves_from_the_page(ui, browser):
    db, url = ui
    wait = WebDriverWait(browser, 10)
    browser.get(url)
    # The runs page: find the run and open its story.
    wait.until(seen.presence_of_element_located((By.LINK_TEXT, "refund-7"))).click()
    wait.until(seen.presence_of_element_located((By.ID, "timeline")))
    assert "Run refund-7" in browser.title
    assert browser.find_element(By.ID, "state").text == "waiting_human"
    assert [w["how"] for w in show(db, "refund-7")["waits"]] == ["open"]

    form = browser.find_element(By.CSS_SELECTOR, "form[action='/approve']")
    form.find_element(By.NAME, "operator").send_keys("ann")
    form.find_element(By.NAME, "reason").send_keys("order 17 checked")
    form.find_element(By.CSS_SELECTOR, "button[value='approve']").click()
    result = wait.until(seen.presence_of_element_located((By.ID, "result")))
    assert "approved by ann as finance" in result.text, result.text

    [approval] = show(db, "refund-7")["waits"]
    assert (approval["how"], approval["by"]) == ("approved", "ann: order 17 checked")
    # The other run still waits: the click answered one approval.
    assert [w["how"] for w in show(db, "refund-6")["waits"]] == ["open"]

    browser.find_element(By.LINK_TEXT, "refund-7").click()
    wait.until(seen.presence_of_element_located((By.ID, "timeline")))
    assert "ann: order 17 checked" in browser.page_source
    SCREENSHOT.parent.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOT))
