"""A request body as JSON whose meaning is sound: an object, its strings Unicode text, its integers
ones Python will convert. Framing, size and time are the HTTP layer's (limits.py); these checks are
about what the bytes say, and each failure is a 400 naming what is wrong."""
from __future__ import annotations

import json
import re
import sys

from .api import bad

_SURROGATE = re.compile("[\ud800-\udfff]")


def parse_json_object(data: bytes) -> dict:
    try:
        body = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad(f"the request body is not valid JSON: {e}") from None
    except RecursionError:
        raise bad("the request body is nested too deeply") from None
    except ValueError:  # Python's limit on int-string conversion (CVE-2020-10735)
        raise bad(f"the request body holds an integer longer than {sys.get_int_max_str_digits()} digits") from None
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    where = _lone_surrogate(body)
    if where is not None:
        raise bad(f"the request body holds a lone UTF-16 surrogate (\\u{ord(where):04x}), which is not "
                  f"Unicode text: a surrogate escape must be one of a high-low pair")
    return body


def _lone_surrogate(obj) -> str | None:
    """The first lone surrogate in any string (key or value) of parsed JSON, or None.

    json.loads lets `"\\ud800"` through (and bytes that encode a surrogate), but no such
    string can be encoded as UTF-8 later. Iterative: the body may be as deep as json allows."""
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, str):
            m = _SURROGATE.search(o)
            if m:
                return m.group()
        elif isinstance(o, dict):
            stack.extend(o)
            stack.extend(o.values())
        elif isinstance(o, list):
            stack.extend(o)
    return None
