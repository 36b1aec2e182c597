"""examples/desktop_chat.py driven as a person would: pick the model, type, send, watch the answer
stream in, stop a long one mid-answer, and a screenshot of it all: into $LOCALINFER_SCREENSHOT_DIR when set
(`LOCALINFER_SCREENSHOT_DIR=docs` renews docs/desktop_chat.png), otherwise into the test's temporary folder.

It runs under Qt's offscreen platform (no display needed). Where PySide6 (`pip install '.[desktop]'`)
or the system libraries its platform plugin needs are absent, it skips and says which.
Every wait is on a Qt signal, with a timeout only as a guard against a hang.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("PySide6.QtWidgets", reason="PySide6 is not installed (pip install '.[desktop]')")

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

pytestmark = pytest.mark.slow


def _platform_problem() -> str | None:
    """Why Qt cannot start here, or None. Probed in a child process: a platform plugin that cannot
    load (a missing libEGL, libxkbcommon, fontconfig ...) makes Qt abort the whole process."""
    probe = "from PySide6.QtWidgets import QApplication; QApplication([])"
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        return run.stderr.strip()[-500:] or f"exit status {run.returncode}"
    return None


@pytest.fixture(scope="module")
def desktop_chat():
    problem = _platform_problem()
    if problem:
        pytest.skip(f"Qt's {os.environ['QT_QPA_PLATFORM']} platform cannot start: {problem}")
    spec = importlib.util.spec_from_file_location("desktop_chat", ROOT / "examples" / "desktop_chat.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from PySide6.QtWidgets import QApplication
    app = QApplication.instance() or QApplication([])
    yield module
    app.processEvents()


def wait_for(signal, until=lambda *args: True, timeout_s: float = 180):
    """Runs the Qt event loop until `signal` is emitted with arguments for which `until` is true;
    returns them. The timeout only turns a hang into a failure."""
    from PySide6.QtCore import QEventLoop, QTimer
    loop, got = QEventLoop(), []

    def check(*args):
        if not got and until(*args):
            got.append(args)
            loop.quit()
    signal.connect(check)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    loop.exec()
    signal.disconnect(check)
    assert got, f"no {signal} within {timeout_s} s"
    return got[0]


def send(window, text: str) -> None:
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest
    QTest.keyClicks(window.input, text)
    QTest.mouseClick(window.send_button, Qt.MouseButton.LeftButton)


def test_signals_keep_their_references(desktop_chat):
    """The window emits a signal per token. PySide6 6.12.0 drops a reference to True on every emit,
    which on Python < 3.12 (where True is not immortal) aborts the process after a few hundred."""
    from PySide6 import __version__
    from PySide6.QtCore import QObject, Signal

    class Emitter(QObject):
        text = Signal(str)
    emitter, got = Emitter(), []
    emitter.text.connect(got.append)
    before = sys.getrefcount(True)
    for _ in range(200):
        emitter.text.emit("x")
    assert len(got) == 200
    assert sys.getrefcount(True) > before - 100, f"PySide6 {__version__} leaks a reference on every Signal.emit"


def test_window_streams_stops_and_switches_models(desktop_chat, smollm2_path, gemma3_path, tmp_path):
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    window = desktop_chat.ChatWindow("smollm2")
    window.show()
    try:
        assert wait_for(window.model_ready) == ("smollm2",)
        assert window.send_button.isEnabled() and not window.stop_button.isEnabled()
        names = [window.picker.itemData(i) for i in range(window.picker.count())]
        assert {"smollm2", "gemma3"} <= set(names)  # the catalog

        # A system prompt, a new chat, a question; greedy, so the answer can be checked below.
        system = "You are a friendly assistant."
        QTest.keyClicks(window.system_prompt, system)
        QTest.mouseClick(window.new_chat_button, Qt.MouseButton.LeftButton)
        window.temperature.setValue(0.0)
        window.max_tokens.setValue(48)
        question = "What is the capital of France? Answer in one sentence."
        chunks = []
        window.answer_chunk.connect(chunks.append)
        send(window, question)
        assert not window.send_button.isEnabled() and window.stop_button.isEnabled()
        reason, = wait_for(window.answer_finished)
        assert reason in ("stop", "length")
        assert len(chunks) >= 2  # streamed: the text came in pieces, not at once
        answer = "".join(chunks)
        assert window.session.messages == [{"role": "system", "content": system},
                                           {"role": "user", "content": question},
                                           {"role": "assistant", "content": answer}]
        transcript = window.transcript.toPlainText()
        assert question in transcript and answer.strip() in transcript
        # The window shows what the library gives for the same conversation, without Qt.
        reference = window.model.chat_session(system=system).send(question, temperature=0.0, max_tokens=48)
        assert answer == reference.text

        # A long answer (greedy, it runs past 120 tokens here), stopped mid-way.
        window.max_tokens.setValue(4000)
        chunks.clear()
        send(window, "Write a very long story about a dragon and a knight, with many chapters.")
        worker = window.worker
        wait_for(window.answer_chunk, lambda _: len(chunks) >= 40)
        QTest.mouseClick(window.stop_button, Qt.MouseButton.LeftButton)
        read_at_stop = len(worker.tokens)  # at least what the worker had read when the flag was set
        reason, = wait_for(window.answer_finished)
        assert reason == "stopped" and worker.isFinished()
        assert len(worker.tokens) <= read_at_stop + 1  # only the token being computed at the stop
        shown = window.transcript.toPlainText()
        QApplication.processEvents()
        assert window.transcript.toPlainText() == shown  # no more text after the stop
        assert shown.endswith("[stopped]")
        # The generation itself stopped: the cache holds the prompt and at most the tokens read
        # from the stream (each is computed only when the next is asked for), far from max_tokens.
        generated = window.session.context.tokens[len(window.session.last_prompt_tokens):]
        assert generated == worker.tokens[:len(generated)]
        assert window.session.messages[-1] == {"role": "assistant", "content": "".join(chunks)}
        assert window.send_button.isEnabled() and not window.stop_button.isEnabled()
        shots = Path(os.environ.get("LOCALINFER_SCREENSHOT_DIR") or tmp_path)
        shots.mkdir(parents=True, exist_ok=True)
        assert window.grab().save(str(shots / "desktop_chat.png"))

        # The session goes on after a stop.
        window.max_tokens.setValue(8)
        send(window, "Thanks!")
        assert wait_for(window.answer_finished)[0] in ("stop", "length")
        assert window.session.messages[-2] == {"role": "user", "content": "Thanks!"}

        # The picker loads another catalog model off the GUI thread and closes the previous one.
        old = window.model
        window.picker.setCurrentIndex(names.index("gemma3"))
        assert not window.picker.isEnabled() and not window.send_button.isEnabled()  # while it loads
        assert wait_for(window.model_ready) == ("gemma3",)
        assert old.closed and Path(window.model.path) == gemma3_path
        assert window.transcript.toPlainText() == ""  # a new chat with the new model
    finally:
        window.close()
    assert window.model is None and old.closed


def test_closing_mid_answer_stops_it_and_closes_the_model(desktop_chat, smollm2_path):
    window = desktop_chat.ChatWindow(str(smollm2_path))
    window.show()
    wait_for(window.model_ready)
    model = window.model
    window.max_tokens.setValue(4000)
    send(window, "Write a very long story about a dragon and a knight, with many chapters.")
    worker = window.worker
    wait_for(window.answer_chunk)
    window.close()
    assert worker.isFinished() and model.closed and window.model is None


def test_a_model_that_cannot_load_is_said_in_the_status_line(desktop_chat, tmp_path):
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"this is not GGUF")
    window = desktop_chat.ChatWindow(str(bad))
    try:
        message, = wait_for(window.model_failed)
        assert message.startswith(f"could not load {bad}: ")
        assert window.statusBar().currentMessage() == message
        assert not window.send_button.isEnabled() and window.picker.isEnabled()  # another can be picked
    finally:
        window.close()
