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


def _stored(driver) -> list:
    """The messages of the conversation on screen, as the page keeps them (localStorage)."""
    return driver.execute_script(
        "const id = localStorage.getItem('localinfer.chats.current');"
        "return JSON.parse(localStorage.getItem('localinfer.chats')).find(c => c.id === id).messages;")


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
    assert "prompt" in answer.find_element("css selector", ".meta").text   # llama-server's timings, shown
    # the page sent the system prompt, temperature and max tokens: the API gives the same answer
    _, _, whole = raw(server.url, "POST", "/v1/chat/completions", {
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        "temperature": 0, "max_tokens": 60})
    assert _stored(d)[-1]["content"] == whole["choices"][0]["message"]["content"]

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
    # both conversations are in the list, newest first; the first kept its turns, the stopped answer too
    assert [e.text for e in d.find_elements("css selector", "#chats .open")] == [question, question]
    before = d.execute_script("return JSON.parse(localStorage.getItem('localinfer.chats'))[1].messages")
    assert [m["role"] for m in before] == ["user", "assistant"] * 4
    assert before[5]["finish"] == "stopped" and before[5]["content"]


def test_a_bad_setting_is_the_servers_clear_error(browser, server):
    d = browser
    d.get(server.url + "/")
    _set(d, "temperature", "hot")
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


HOSTILE = (
    "Here is code:\n\n```python\nprint('<b>hi</b>')\n```\n\n"
    "- **bold** and *italic* and `inline`\n- [a site](https://example.com) and [bad](javascript:window.pwned=1)\n\n"
    "<img src=x onerror=\"window.pwned=1\"> <script>window.pwned=1</script> <a href=\"javascript:window.pwned=1\">x</a>")


def _conversation(driver, url, messages, title="injected"):
    """Opens the page with one saved conversation holding `messages`, as if the page had stored it."""
    driver.get(url + "/")
    driver.execute_script("localStorage.clear();"
                          "localStorage.setItem('localinfer.chats', JSON.stringify([{id: 'c1', title: arguments[0],"
                          " model: 'smollm2', messages: arguments[1], updated: 1}]));"
                          "localStorage.setItem('localinfer.chats.current', 'c1');", title, messages)
    driver.get(url + "/")
    _wait(driver, lambda d: d.find_elements("css selector", ".msg"), 20)


def test_answers_render_as_markdown_and_model_html_stays_text(browser, server, tmp_path):
    d = browser
    _conversation(d, server.url, [{"role": "user", "content": "<i>show</i> me"},
                                  {"role": "assistant", "content": HOSTILE, "finish": "stop", "meta": "12 tokens"}])
    text = d.find_element("css selector", ".msg.assistant .text")
    code = text.find_element("css selector", "pre code")
    assert code.text == "print('<b>hi</b>')" and "language-python" in code.get_attribute("class")
    assert text.find_element("css selector", ".code-bar .copy").text == "Copy"
    assert [e.text for e in code.find_elements("css selector", ".tok-string")] == ["'<b>hi</b>'"]   # coloured
    assert text.find_element("css selector", "li strong").text == "bold"
    assert text.find_element("css selector", "li em").text == "italic"
    links = text.find_elements("css selector", "a")
    assert [a.get_attribute("href") for a in links] == ["https://example.com/"]
    assert links[0].get_attribute("rel") == "noopener noreferrer nofollow"
    # the model's markup is characters on the page, never elements; nothing ran
    assert not text.find_elements("css selector", "img, script, b, i")
    assert "<img src=x onerror=" in text.text and "[bad](javascript:window.pwned=1)" in text.text
    assert d.find_element("css selector", ".msg.user .text").text == "<i>show</i> me"
    assert d.execute_script("return window.pwned") is None


def test_conversations_survive_a_reload_and_switch_rename_delete(browser, server):
    d = browser
    _conversation(d, server.url, [{"role": "user", "content": "first question"},
                                  {"role": "assistant", "content": "first answer", "finish": "stop"}], "first")
    _set(d, "temperature", "0")
    _set(d, "max-tokens", "8")
    d.find_element("id", "new-chat").click()
    answer = _ask(d, "Name a color.")
    _wait(d, lambda d: answer.get_attribute("data-finish"))
    d.refresh()   # everything is still there: the conversation on screen, and the list
    _wait(d, lambda d: d.find_elements("css selector", ".msg.assistant"), 20)
    assert [e.text for e in d.find_elements("css selector", "#chats .open")] == ["Name a color.", "first"]
    assert d.find_element("css selector", ".msg.user .text").text == "Name a color."
    d.find_element("css selector", '#chats li[data-id="c1"] .open').click()
    assert [e.text for e in d.find_elements("css selector", ".msg .text")] == ["first question", "first answer"]
    d.execute_script("window.prompt = () => 'renamed'; window.confirm = () => true;")
    d.find_element("css selector", '#chats li[data-id="c1"] .rename').click()
    assert d.find_element("css selector", '#chats li[data-id="c1"] .open').text == "renamed"
    d.find_element("css selector", '#chats li[data-id="c1"] .delete').click()
    assert [e.text for e in d.find_elements("css selector", "#chats .open")] == ["Name a color."]
    assert d.find_elements("css selector", "#messages > *") == []
    d.refresh()
    _wait(d, lambda d: d.find_elements("css selector", "#chats .open"), 20)
    assert "renamed" not in d.execute_script("return localStorage.getItem('localinfer.chats')")


def test_regenerate_and_edit_and_resend(browser, server):
    d = browser
    d.get(server.url + "/")
    d.execute_script("localStorage.clear()")
    d.get(server.url + "/")
    _set(d, "temperature", "0")
    _set(d, "max-tokens", "12")
    first = _ask(d, "Say something about cats.")
    _wait(d, lambda d: first.get_attribute("data-finish"))
    said = _stored(d)[-1]["content"]
    first.find_element("css selector", ".regenerate").click()   # greedy: the same answer again, in its place
    _wait(d, lambda d: len(_stored(d)) == 2 and _stored(d)[-1].get("finish"))
    assert _stored(d)[-1]["content"] == said and len(d.find_elements("css selector", ".msg")) == 2
    d.find_element("css selector", ".msg.user .edit").click()   # the question back in the box, the turn gone
    assert d.find_element("id", "input").get_attribute("value") == "Say something about cats."
    assert d.find_elements("css selector", ".msg") == [] and _stored(d) == []
    _set(d, "input", "Say something about dogs.\n")
    _wait(d, lambda d: len(_stored(d)) == 2 and _stored(d)[-1].get("finish"))
    assert [m["content"] for m in _stored(d)][0] == "Say something about dogs."


def test_phone_width(browser, server, tmp_path):
    d = browser
    d.set_window_size(390, 844)
    try:
        _conversation(d, server.url, [{"role": "user", "content": "Hello from a phone"},
                                      {"role": "assistant", "content": "Hello! **Short** answers fit.\n\n"
                                                                       "```sh\nls -la\n```", "finish": "stop",
                                       "meta": "9 tokens · 41.0 tok/s"}])
        sidebar = d.find_element("id", "settings")
        width = d.execute_script("return document.documentElement.clientWidth")
        assert sidebar.rect["x"] + sidebar.rect["width"] <= 0   # a drawer, off screen
        composer = d.find_element("id", "input")
        assert composer.rect["width"] > width * 0.55 and d.find_element("id", "send").is_displayed()
        assert d.execute_script("return document.documentElement.scrollWidth") <= width   # nothing overflows
        shots = Path(os.environ.get("LOCALINFER_SCREENSHOT_DIR") or tmp_path)
        shots.mkdir(parents=True, exist_ok=True)
        assert d.save_screenshot(str(shots / "web_chat_phone.png"))
        d.find_element("id", "menu").click()
        _wait(d, lambda d: d.find_element("id", "settings").rect["x"] >= 0, 5)
        assert d.find_element("css selector", "#chats .open").is_displayed()
        from selenium.webdriver.common.action_chains import ActionChains
        messages = d.find_element("id", "messages")   # a tap on the chat beside the drawer closes it
        ActionChains(d).move_to_element_with_offset(messages, messages.rect["width"] // 2 - 20, 0).click().perform()
        _wait(d, lambda d: sidebar.rect["x"] + sidebar.rect["width"] <= 0, 5)
    finally:
        d.set_window_size(1100, 760)


def test_the_model_picker_sends_the_chosen_model(browser, smollm2_path):
    from localinfer.batching.config import EngineConfig
    from localinfer.serve.app import make_registry_server
    from localinfer.serve.pool import ModelPool
    d = browser
    pool = ModelPool({"small": smollm2_path, "other": smollm2_path}, EngineConfig(n_slots=1, n_ctx=256))
    with BackgroundServer(make_registry_server(pool, port=0)) as s:
        d.get(s.url + "/")
        d.execute_script("localStorage.clear()")
        d.get(s.url + "/")
        picker = d.find_element("id", "model")
        _wait(d, lambda d: picker.is_displayed(), 20)
        options = [o.text for o in picker.find_elements("css selector", "option")]
        assert sorted(options) == ["other", "small"]
        from selenium.webdriver.support.ui import Select
        Select(picker).select_by_visible_text("other")
        _set(d, "max-tokens", "4")
        answer = _ask(d, "Hi")
        _wait(d, lambda d: answer.get_attribute("data-finish"))
        assert answer.get_attribute("data-finish") in ("stop", "length")
        chats = d.execute_script("return JSON.parse(localStorage.getItem('localinfer.chats'))")
        assert chats[0]["model"] == "other"
        assert "other" in [m.name for m in pool.loaded()]
        d.execute_script("localStorage.clear()")
