"""A desktop chat window on localinfer, in PySide6 (Qt 6): answers stream in as they are generated.

    pip install 'localinfer[desktop]'           # PySide6-Essentials (not 6.12.0: see pyproject.toml)
    python examples/desktop_chat.py [MODEL]     # a catalog name or a .gguf path (default: the catalog's)

Qt widgets may only be touched from the GUI thread, and a generation would freeze that thread, so the
model works in worker QThreads: `AnswerWorker` reads a ChatSession's stream chunk by chunk and emits a
signal for each; Qt queues the signal onto the GUI thread, where the text is appended. Stop sets a flag
that the worker checks after every chunk: it then closes the stream, so generation ends within one
token (the KV cache keeps the partial answer, and the next turn goes on from it). A worker thread needs
nothing beyond Qt; an asyncio app could run the async API (`model.astream`) under qasync instead.

Loading a model (and fetching a catalog model on first use) runs in `ModelLoader`, another QThread,
with the status line saying what it is doing; the previous model is closed once the new one is ready.
"""
from __future__ import annotations

import html
import sys
import threading
import time

from PySide6.QtCore import QThread, Signal
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import (QApplication, QComboBox, QDoubleSpinBox, QHBoxLayout, QLabel, QLineEdit,
                               QMainWindow, QPushButton, QSpinBox, QTextBrowser, QVBoxLayout, QWidget)

import localinfer
from localinfer.files.fetch import load_catalog, resolve_model


class ModelLoader(QThread):
    """Fetches (if needed) and loads one model off the GUI thread."""
    status = Signal(str)
    loaded = Signal(object)  # the localinfer.Model
    failed = Signal(str)

    def __init__(self, name: str):
        super().__init__()
        self.name = name
        self.model = None  # set before `loaded` is emitted: a window closed meanwhile closes it

    def run(self) -> None:
        def fetching(done: int, total: int) -> None:
            self.status.emit(f"fetching {self.name}: {done * 100 // max(total, 1)}%")
        try:
            path = resolve_model(self.name, progress=fetching)
            self.status.emit(f"loading {self.name}…")
            self.model = localinfer.load(path)
            self.loaded.emit(self.model)
        except Exception as e:  # shown in the status line; the window stays usable with its old model
            self.failed.emit(f"could not load {self.name}: {e}")


class AnswerWorker(QThread):
    """Streams one answer of a ChatSession; `stop()` ends it after the token being computed."""
    chunk = Signal(str)
    done = Signal(str, str)  # finish reason ("stop", "length", "stopped", "error"), a summary for the status line

    def __init__(self, session, text: str, options: dict):
        super().__init__()
        self.session, self.text, self.options = session, text, options
        self._stop = threading.Event()
        self.tokens: list[int] = []  # every token read from the stream, for the caller to check

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        reason, first = "stopped", None
        try:
            stream = self.session.stream(self.text, **self.options)
            try:
                for chunk in stream:
                    first = first or time.perf_counter()
                    self.tokens += chunk.tokens
                    if chunk.text:  # shown even after a stop: the session keeps it in the conversation
                        self.chunk.emit(chunk.text)
                    if chunk.finish_reason:
                        reason = chunk.finish_reason
                    if self._stop.is_set():
                        break  # the next token is never asked for
            finally:
                stream.close()  # ends the generation; the session records the partial answer
        except Exception as e:  # a full context, a closed model: said in the status line
            self.done.emit("error", str(e))
            return
        n = len(self.tokens)
        rate = (n - 1) / (time.perf_counter() - first) if first and n > 1 else 0.0
        self.done.emit(reason, f"{reason}: {n} tokens, {rate:.1f} tok/s")


class ChatWindow(QMainWindow):
    model_ready = Signal(str)      # a model finished loading (its name)
    model_failed = Signal(str)     # one could not be loaded (why)
    answer_chunk = Signal(str)     # a piece of the answer was shown
    answer_finished = Signal(str)  # the answer ended: its finish reason

    def __init__(self, model: str | None = None):
        super().__init__()
        self.setWindowTitle("localinfer chat")
        self.model = None      # the loaded localinfer.Model
        self.model_name = ""
        self.session = None    # its ChatSession: the conversation and its KV cache
        self.worker: AnswerWorker | None = None
        self.loader: ModelLoader | None = None
        self.closed = False

        self.picker = QComboBox()
        default, entries = load_catalog()
        for name, entry in entries.items():
            self.picker.addItem(f"{name} ({entry.size / 2**20:.0f} MiB)", name)
        if model is not None and self.picker.findData(model) < 0:
            self.picker.addItem(model, model)  # a .gguf path from the command line
        self.temperature = QDoubleSpinBox(minimum=0.0, maximum=2.0, singleStep=0.1, value=0.7)
        self.max_tokens = QSpinBox(minimum=1, maximum=32768, value=512)
        self.system_prompt = QLineEdit(placeholderText="System prompt (used from the next new chat)")
        self.new_chat_button = QPushButton("New chat")
        self.transcript = QTextBrowser()
        self.input = QLineEdit(placeholderText="Message")
        self.send_button = QPushButton("Send")
        self.stop_button = QPushButton("Stop")
        self._lay_out()

        self.picker.currentIndexChanged.connect(lambda _: self.load_model(self.picker.currentData()))
        self.new_chat_button.clicked.connect(self.new_chat)
        self.send_button.clicked.connect(self.send)
        self.input.returnPressed.connect(self.send)
        self.stop_button.clicked.connect(self.stop)
        self.picker.blockSignals(True)  # the first load is started below, once
        self.picker.setCurrentIndex(self.picker.findData(model or default))
        self.picker.blockSignals(False)
        self.load_model(self.picker.currentData())

    def _lay_out(self) -> None:
        settings = QHBoxLayout()
        for label, widget in (("Model", self.picker), ("Temperature", self.temperature),
                              ("Max tokens", self.max_tokens)):
            settings.addWidget(QLabel(label))
            settings.addWidget(widget)
        settings.addStretch()
        system = QHBoxLayout()
        system.addWidget(self.system_prompt)
        system.addWidget(self.new_chat_button)
        message = QHBoxLayout()
        message.addWidget(self.input)
        message.addWidget(self.send_button)
        message.addWidget(self.stop_button)
        column = QVBoxLayout()
        column.addLayout(settings)
        column.addLayout(system)
        column.addWidget(self.transcript)
        column.addLayout(message)
        central = QWidget()
        central.setLayout(column)
        self.setCentralWidget(central)
        self.resize(820, 520)

    def _update_buttons(self) -> None:
        streaming = self.worker is not None
        idle = self.session is not None and not streaming and self.loader is None
        self.send_button.setEnabled(idle)
        self.stop_button.setEnabled(streaming)
        self.new_chat_button.setEnabled(idle)
        self.picker.setEnabled(not streaming and self.loader is None)

    # -- the model ---------------------------------------------------------------------------------
    def load_model(self, name: str) -> None:
        self.loader = ModelLoader(name)
        self.loader.status.connect(self.statusBar().showMessage)
        self.loader.loaded.connect(self._on_loaded)
        self.loader.failed.connect(self._on_load_failed)
        self.statusBar().showMessage(f"loading {name}…")
        self._update_buttons()
        self.loader.start()

    def _on_loaded(self, model) -> None:
        if self.closed:
            return  # closeEvent has closed it
        self.loader.wait()  # run() is returning: a QThread dropped while it runs aborts the process
        name, self.loader = self.loader.name, None
        old, self.model, self.model_name = self.model, model, name
        self.session = None
        if old is not None:
            old.close()  # its mapping, caches and engine go now, not when the garbage collector gets to them
        self.new_chat()
        self.statusBar().showMessage(f"{name} ready: {model.architecture}, context {model.n_ctx} tokens")
        self._update_buttons()
        self.model_ready.emit(name)

    def _on_load_failed(self, message: str) -> None:
        self.loader.wait()
        self.loader = None
        self.statusBar().showMessage(message)
        self._update_buttons()
        self.model_failed.emit(message)

    # -- the conversation --------------------------------------------------------------------------
    def new_chat(self) -> None:
        """Starts over with the system prompt as it is now."""
        self.session = self.model.chat_session(system=self.system_prompt.text().strip() or None)
        self.transcript.clear()
        self._update_buttons()
        self.input.setFocus()

    def send(self) -> None:
        text = self.input.text().strip()
        if not text or not self.send_button.isEnabled():
            return
        self.input.clear()
        self.transcript.append(f"<p><b>You:</b> {html.escape(text)}</p>")
        self.transcript.append(f"<p><b>{html.escape(self.model_name)}:</b> ")
        options = {"temperature": self.temperature.value(), "max_tokens": self.max_tokens.value()}
        self.worker = AnswerWorker(self.session, text, options)
        self.worker.chunk.connect(self._on_chunk)
        self.worker.done.connect(self._on_done)
        self._update_buttons()
        self.worker.start()

    def _on_chunk(self, text: str) -> None:
        self._append(text)
        self.answer_chunk.emit(text)

    def _append(self, text: str, markup: bool = False) -> None:
        cursor = self.transcript.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        if markup:  # only the window's own text
            cursor.insertHtml(text)
        else:
            cursor.insertText(text)  # the model's output is never read as markup
        self.transcript.ensureCursorVisible()

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()

    def _on_done(self, reason: str, summary: str) -> None:
        self.worker.wait()  # run() has returned: the stream is closed
        self.worker = None
        if reason == "stopped":
            self._append('&nbsp;<i style="color:#888">[stopped]</i>', markup=True)
        self.input.setFocus()  # ready for the next message
        self.statusBar().showMessage(f"{self.model_name} · {summary}")
        self._update_buttons()
        self.answer_finished.emit(reason)

    def closeEvent(self, event) -> None:
        self.closed = True
        if self.worker is not None:
            self.worker.stop()
            self.worker.wait()
        if self.loader is not None:
            self.loader.wait()  # a load cannot be interrupted: wait, then close what it loaded
            if self.loader.model is not None:
                self.loader.model.close()
        if self.model is not None:
            self.model.close()
            self.model = self.session = None
        super().closeEvent(event)


def main() -> int:
    app = QApplication(sys.argv)
    window = ChatWindow(sys.argv[1] if len(sys.argv) > 1 else None)
    window.show()
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
