"""Text from outside (transcripts, file names, manifest fields, error texts) written so that
it cannot break the file or screen it lands in: one function per kind of output.

- `json_text`: JSON and JSON lines (predictions.jsonl, metrics.json, transcripts' .json,
  data reports). Reads back to the same value in any parser: a lone surrogate (a file name
  that is not UTF-8, kept by Python as surrogate escapes) is written as `\\udXXX`, not as
  bytes UTF-8 cannot hold; U+2028, U+2029 and U+0085, which `str.splitlines` and older
  JavaScript take for line ends, are escaped too, so one record stays one line.
- `json_for_html`: the same inside an HTML `<script>` (every `<` escaped).
- `html_text`: text inside an HTML element or attribute.
- `plain_text`: a plain-text file (a transcript's .txt): its lines kept, every other kind
  of line break made a newline, control characters dropped.
- `one_line`: a subtitle cue or a TSV cell: control characters dropped, every kind of line
  break and run of white space one space, so a cue stays one line and a row one row.
- `vtt_cue`: `one_line` with WebVTT's escapes (`&`, `<`, `>`: cue text is markup, and
  `-->` would end it).
- `terminal_text`: a message printed to a terminal: control characters, bidirectional
  overrides and invisible line breaks shown as escapes (`\\x1b`, `\\u202e`), so a file name
  cannot move the cursor, recolour the screen or reorder what the user reads.

CSV goes through the `csv` module, which quotes what needs quoting; cells are written as
they are (a cell starting with `=`, `+`, `-` or `@` is data to read back exactly, not a
formula: open the file in a spreadsheet as text). `tests/test_safe_text.py` feeds a corpus
of hostile strings through every writer and parses each output back.
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from typing import Any

# Characters JSON may hold raw that some readers break lines at, and lone surrogates.
_JSON_ESCAPED = re.compile("[\x85\u2028\u2029\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# Every line end `str.splitlines` knows (\r\n first, as one).
_LINE_BREAKS = re.compile("\r\n|[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
# Bidirectional embeddings, overrides and isolates (Trojan Source), shown as escapes.
_BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def json_text(value: Any, *, indent: int | None = None, compact: bool = False) -> str:
    """`value` as JSON text (non-ASCII kept readable) that reads back to `value`."""
    separators = (",", ":") if compact else None
    text = json.dumps(value, ensure_ascii=False, indent=indent, separators=separators)
    return _JSON_ESCAPED.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def json_for_html(value: Any) -> str:
    """`json_text` for a `<script type="application/json">` element: no `<` can end it
    (`</script>`) or open a comment (`<!--`); JSON has `<` only inside strings."""
    return json_text(value, compact=True).replace("<", "\\u003c")


def html_text(text: str) -> str:
    """`text` for an HTML element or attribute: markup escaped, lone surrogates replaced."""
    return html.escape(_SURROGATE.sub("\ufffd", text), quote=True)


def plain_text(text: str) -> str:
    """`text` for a plain-text file: every kind of line break one "\\n" (so every reader
    sees the same lines), other control characters but tab dropped, lone surrogates too."""
    text = _LINE_BREAKS.sub("\n", _SURROGATE.sub("", text))
    return "".join(c for c in text if c in "\n\t" or unicodedata.category(c) != "Cc")


def one_line(text: str) -> str:
    """`text` as one line: control characters and lone surrogates dropped, every line break
    (U+2028, U+0085 included) and run of white space one space."""
    kept = "".join(
        " " if c.isspace() else c
        for c in _SURROGATE.sub("", text)
        if c.isspace() or unicodedata.category(c) != "Cc"
    )
    return " ".join(kept.split())


def vtt_cue(text: str) -> str:
    """`one_line` with WebVTT's escapes for cue text."""
    return one_line(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def terminal_text(text: str) -> str:
    """`text` for a terminal: newlines and tabs kept; every other control character, line
    break, bidirectional control and lone surrogate shown as an escape."""
    return "".join(c if c in "\n\t" or not _unsafe_on_screen(c) else _escaped(c) for c in text)


def _unsafe_on_screen(c: str) -> bool:
    return (
        c in _BIDI
        or unicodedata.category(c) in ("Cc", "Zl", "Zp", "Cs")
        or c == "\x85"  # Cc, named for clarity: a line break to some terminals
    )


def _escaped(c: str) -> str:
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"
