"""`localinfer run --json-schema SCHEMA`, `--json-schema-file FILE`, `--grammar GBNF` and `--grammar-file
FILE`, with llama.cpp's meanings, as a user runs them."""
from __future__ import annotations

import json
import subprocess

import jsonschema

from terminal import CMD

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                           "population": {"type": "integer", "minimum": 0}},
          "required": ["city", "population"], "additionalProperties": False}


def _run(args, timeout=120):
    return subprocess.run(CMD + args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_json_schema_file(tmp_path):
    path = tmp_path / "city.json"
    path.write_text(json.dumps(SCHEMA))
    r = _run(["run", "smollm2", "-p", "A city as JSON.", "-n", "60", "--temp", "1.0", "--seed", "4",
              "--json-schema-file", str(path)])
    assert r.returncode == 0, r.stderr
    jsonschema.validate(json.loads(r.stdout), SCHEMA)
    inline = _run(["run", "smollm2", "-p", "A city as JSON.", "-n", "60", "--temp", "1.0", "--seed", "4",
                   "-j", json.dumps(SCHEMA)])
    assert inline.returncode == 0 and inline.stdout == r.stdout, inline.stderr
    # llama.cpp's --json-schema is the schema itself: a file name there is a usage error that says so
    r = _run(["run", "smollm2", "-p", "hi", "--json-schema", str(path)])
    assert r.returncode == 2 and "use --json-schema-file" in r.stderr


def test_grammar_file_is_gbnf(tmp_path):
    path = tmp_path / "answer.gbnf"
    path.write_text('root ::= ("yes" | "no") " because " [a-z ]{1,20} "."\n')
    r = _run(["run", "smollm2", "-p", "Is water wet?", "-n", "40", "--temp", "0", "--grammar-file", str(path)])
    assert r.returncode == 0, r.stderr
    out = r.stdout.strip()
    assert out.split(" ")[0] in ("yes", "no") and " because " in out and out.endswith("."), out
    inline = _run(["run", "smollm2", "-p", "Is water wet?", "-n", "40", "--temp", "0", "--grammar", path.read_text()])
    assert inline.returncode == 0 and inline.stdout.strip() == out, inline.stderr


def test_bad_constraint_files_are_messages_not_tracebacks(tmp_path):
    schema = tmp_path / "bad.json"
    schema.write_text('{"type": "integr"}')
    r = _run(["run", "smollm2", "-p", "hi", "--json-schema-file", str(schema)])
    assert r.returncode != 0 and "bad.json" in r.stderr and "integr" in r.stderr and "Traceback" not in r.stderr
    grammar = tmp_path / "bad.gbnf"
    grammar.write_text("root ::= undefined_rule\n")
    r = _run(["run", "smollm2", "-p", "hi", "--grammar-file", str(grammar)])
    assert r.returncode != 0 and "bad.gbnf" in r.stderr and "Traceback" not in r.stderr
    r = _run(["run", "smollm2", "-p", "hi", "--grammar-file", str(grammar), "--json-schema-file", str(schema)])
    assert r.returncode == 2 and "give one of --json-schema-file and --grammar-file" in r.stderr
