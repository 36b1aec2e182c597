"""The chat page in a real headless Chromium (selenium), against a real server: streamed tokens
appear, the answer is the API's own, Stop ends the generation and frees the slot, New chat clears.
Saves a screenshot: into $LOCALINFER_SCREENSHOT_DIR when set (`LOCALINFER_SCREENSHOT_DIR=docs` renews
docs/web_chat.png), otherwise into the test's temporary folder, so a test run leaves the checkout as it
was. Skips, saying why, where selenium, Chromium or its driver is missing
(.ci/run installs Debian's chromium and chromium-driver)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import localinfer
from localinfer.serve.app import BackgroundServer

from serve_helpers import raw, wait_idle

pytestmark = pytest.mark.slow
NAME = "smollm2"
SYSTEM = "You are a helpful assistant. Answer briefly."


def _browser_or_skip():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install -e '.[test]')")
    binary = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    driver = shutil.which("chromedriver")
    if binary is None or driver is None:
        pytest.skip("no headless browser: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,760",
                "--disable-gpu", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(driver))


@pytest.fixture(scope="module")
def server(smollm2_path):
    model = localinfer.load(str(smollm2_path), n_ctx=1024)
    with BackgroundServer(model, NAME, port=0, n_slots=1, n_ctx=1024) as s:
        yield s


@pytest.fixture(scope="module")
def browser():
    driver = _browser_or_skip()
    yield driver
    driver.quit()


def _wait(driver, condition, timeout=120.0):
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: condition(d))


def _set(driver, element_id: str, value: str) -> None:
    el = driver.find_element("id", element_id)
    el.clear()
    el.send_keys(value)


def _ask(driver, text: str):
    """Sends `text` from the composer; returns the new assistant message element."""
    before = len(driver.find_elements("css selector", ".msg.assistant"))
    _set(driver, "input", text + "\n")  # Enter sends
    _wait(driver, lambda d: len(d.find_elements("css selector", ".msg.assistant")) > before, 10)
    return driver.find_elements("css selector", ".msg.assistant")[-1]


# Records each length the newest answer's text goes through, as the browser renders it.
WATCH = """
window.seenLengths = [];
new MutationObserver(() => {
  const texts = document.querySelectorAll('.msg.assistant .text');
  if (texts.length) window.seenLengths.push(texts[texts.length - 1].textContent.length);
}).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});
"""


def test_chat_in_the_browser(browser, server, tmp_path):
    d = browser
    d.get(server.url + "/")
    _wait(d, lambda d: d.find_element("id", "model-name").text == NAME, 20)
    assert "1024" in d.find_element("id", "model-ctx").text
    _set(d, "system-prompt", SYSTEM)
    _set(d, "temperature", "0")
    _set(d, "max-tokens", "60")
    d.execute_script(WATCH)

    question = "Give me a tip for learning Python."
    answer = _ask(d, question)
    _wait(d, lambda d: answer.get_attribute("data-finish"))
    assert answer.get_attribute("data-finish") in ("stop", "length")
    shown = answer.find_element("css selector", ".text").text
    seen = d.execute_script("return window.seenLengths")
    assert len({n for n in seen if 0 < n < len(shown)}) >= 2, seen  # it grew in pieces: streamed
    assert "tok/s" in answer.find_element("css selector", ".meta").text
    # the page sent the system prompt, temperature and max tokens: the API gives the same answer
    _, _, whole = raw(server.url, "POST", "/v1/chat/completions", {
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        "temperature": 0, "max_tokens": 60})
    assert shown == whole["choices"][0]["message"]["content"].strip()

    second = _ask(d, "And one for learning French?")
    _wait(d, lambda d: second.get_attribute("data-finish"))
    assert second.find_element("css selector", ".text").text
    shots = Path(os.environ.get("LOCALINFER_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    assert d.save_screenshot(str(shots / "web_chat.png"))

    # Stop mid-answer: the browser drops the connection, the server cancels and frees the slot
    _set(d, "max-tokens", "900")
    long = _ask(d, "Write a very long story about a dragon who learns to cook.")
    _wait(d, lambda d: len(long.find_element("css selector", ".text").text) > 20)
    assert server.engine.state()["slots_busy"] == 1
    d.find_element("id", "stop").click()
    _wait(d, lambda d: long.get_attribute("data-finish") == "stopped", 10)
    state = wait_idle(server.url)
    assert state["slots_busy"] == 0 and state["queue_length"] == 0, state
    stopped_text = long.find_element("css selector", ".text").text
    chunks = int(long.find_element("css selector", ".meta").text.split("stopped · ")[1].split()[0])
    assert 0 < chunks < 900 and stopped_text
    assert d.find_element("id", "stop").get_attribute("disabled")

    # New chat, even mid-answer, starts over: nothing of before is sent with the next question
    _ask(d, "Write another long story, about a robot.")
    _wait(d, lambda d: d.find_element("css selector", ".msg.assistant:last-child .text").text)
    d.find_element("id", "new-chat").click()
    assert d.find_elements("css selector", "#messages > *") == []
    assert wait_idle(server.url)["slots_busy"] == 0
    _set(d, "max-tokens", "60")
    fresh = _ask(d, question)
    _wait(d, lambda d: fresh.get_attribute("data-finish"))
    assert fresh.find_element("css selector", ".text").text == shown
    assert len(d.find_elements("css selector", ".msg")) == 2


def test_a_bad_setting_is_the_servers_clear_error(browser, server):
    d = browser
    d.get(server.url + "/")
    _set(d, "temperature", "")
    answer = _ask(d, "Hi")
    _wait(d, lambda d: answer.get_attribute("data-finish") == "error", 20)
    assert "temperature" in answer.find_element("css selector", ".meta").text
    _set(d, "temperature", "0")

def test_the_page_sends_the_api_key(browser, server):
    d = browser
    with BackgroundServer(server.server.model, NAME, port=0, n_slots=1, n_ctx=256, api_key="s3cret") as s:
        d.get(s.url + "/")
        d.execute_script("localStorage.clear()")  # the settings the other test saved
        d.get(s.url + "/")
        _wait(d, lambda d: "API key" in d.find_element("id", "status").text, 20)
        assert d.find_element("id", "model-name").text == "?"
        _set(d, "api-key", "s3cret\t")  # a change event: the page asks again with the key
        _wait(d, lambda d: d.find_element("id", "model-name").text == NAME, 20)
        assert d.find_element("id", "status").text == ""
        _set(d, "max-tokens", "4")
        answer = _ask(d, "Hi")
        _wait(d, lambda d: answer.get_attribute("data-finish"))
        assert answer.get_attribute("data-finish") in ("stop", "length")
        d.execute_script("localStorage.clear()")
