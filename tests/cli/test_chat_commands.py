"""The interactive chat's Ollama-style commands and multi-line input (cli/chat_commands.py)."""
import pytest

import localinfer
from localinfer.cli.chat_commands import command, read_message
from terminal import Terminal


@pytest.fixture(scope="module")
def model(smollm2_path):
    with localinfer.load(str(smollm2_path), n_ctx=256) as m:
        yield m


def test_set_parameter_changes_the_next_answers(model):
    session = model.chat_session(temperature=0.8, max_tokens=-1)
    assert command(session, "/set parameter temperature 0").text == "Set parameter 'temperature' to '0'"
    assert command(session, "/set num_predict 5").text.startswith("Set parameter")   # Ollama's short form
    assert session.defaults["temperature"] == 0.0 and session.defaults["max_tokens"] == 5
    assert session.send("Hi").tokens == model.generate(model.chat_tokens([{"role": "user", "content": "Hi"}]),
                                                       temperature=0, max_tokens=5).tokens
    for bad, says in (("/set parameter temperature hot", "not a number"), ("/set parameter top_p 2", "between"),
                      ("/set parameter num_ctx 4096", "Unknown parameter"), ("/set top_k", "Usage")):
        assert says in command(session, bad).text, bad
    assert session.defaults["temperature"] == 0.0
    shown = command(session, "/show parameters").text
    assert "temperature" in shown and "num_predict" in shown


def test_set_system_keeps_the_conversation(model):
    session = model.chat_session(temperature=0, max_tokens=3)
    session.send("Hi")
    command(session, "/set system You are  a pirate.")
    assert session.messages[0] == {"role": "system", "content": "You are  a pirate."} and len(session.messages) == 3
    assert command(session, "/show system").text == "You are  a pirate."
    command(session, "/set system")
    assert session.messages[0]["role"] == "user" and session.system is None


def test_show_info_names_the_model(model):
    info = command(model.chat_session(), "/show info").text
    assert "llama" in info and str(model.n_ctx) in info and "Q4_1" in info


def test_other_lines_starting_with_a_slash_are_not_sent():
    assert "Unknown command '/sett'" in command(None, "/sett temperature 0").text
    assert command(None, "/bye") is None and command(None, "/set verbose").verbose is True
    assert command(None, "/exit") is None


def test_triple_quotes_read_several_lines():
    lines = iter(["second line", "", 'third"""'])
    assert read_message('"""first', lambda: next(lines)) == "first\nsecond line\n\nthird"
    assert read_message('"""one line"""', lambda: pytest.fail("read past the block")) == "one line"
    lines = iter(["x", 'y"""'])
    assert read_message('"""', lambda: next(lines)) == "x\ny"
    assert read_message('"""open', lambda: None) is None   # input ended inside the block
    assert read_message("plain", None) == "plain"


@pytest.mark.slow
def test_the_commands_in_a_terminal(smollm2_path):
    term = Terminal(["run", "smollm2", "-n", "8", "--quiet"])
    term.expect(">>> ")
    term.send("/set parameter temperature 0\r")
    term.expect("Set parameter 'temperature' to '0'")
    term.send('"""Say\r')
    term.expect("... ")
    term.send('hello."""\r')
    term.expect(">>> ", timeout=120)
    term.send("/nonsense\r")
    term.expect("Unknown command '/nonsense'")
    term.send("/bye\r")
    assert term.wait() == 0
