"""What every text and label must be: a string UTF-8 can hold; JSON read without
letting its nesting overflow the parser (:func:`loads_json`); an error's text as one
short line (:func:`one_line`).

Python strings can carry lone surrogates (``"\\ud800"``: valid JSON, from
``json.loads`` or from command-line bytes that are not UTF-8), which no
tokenizer, hash or JSON writer downstream accepts. They are refused where a
text enters, with its position, so one bad text never reaches a trunk pass.
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def surrogate_at(text: str) -> int | None:
    """The index of the first lone surrogate in ``text``, or None when UTF-8 holds it."""
    if text.isascii():
        return None
    found = _SURROGATE.search(text)
    return None if found is None else found.start()


def unicode_problem(text: str) -> str | None:
    """Why ``text`` cannot be read (``None`` when it can): a lone surrogate, where."""
    at = surrogate_at(text)
    if at is None:
        return None
    return (
        f"holds a lone surrogate (U+{ord(text[at]):04X}) at character {at}, which is not "
        "valid Unicode text"
    )


def without_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD, so UTF-8 can hold it (for
    writing back a row that was refused for one)."""
    return text if surrogate_at(text) is None else _SURROGATE.sub("\ufffd", text)


class JSONTooDeep(ValueError):
    """JSON nested deeper than Python's parser can follow (thousands of ``[``)."""


def loads_json(text: str | bytes) -> Any:
    """``json.loads(text)``, with JSON nested too deep to parse refused as a
    ``ValueError`` (:class:`JSONTooDeep`) like any other malformed JSON, instead of
    Python's ``RecursionError``."""
    import json

    try:
        return json.loads(text)
    except RecursionError:
        raise JSONTooDeep("JSON nested too deep to read") from None


def one_line(exc: BaseException) -> str:
    """``exc``'s text on one line (its whitespace runs made one space), at most 200
    characters; its type's name when it says nothing."""
    return " ".join(str(exc).split())[:200] or type(exc).__name__
