"""The model card of an export: the source's card (a fitwhisper run writes one into
final/) with an Exports section, the table of formats, the engines that load them, their
sizes and, after `--manifest`, their re-scored error beside the source's."""

from __future__ import annotations

from pathlib import Path

from fitwhisper.export.formats import FORMATS, Written
from fitwhisper.export.rescoring import Rescore
from fitwhisper.models.card import CARD, plain_card, with_exports


def exports_table(written: list[Written], rescored: Rescore | None) -> str:
    """Markdown: one row per format; error and speed columns when they were re-scored."""
    head = "| format | engine | load it with | size MB |"
    rule = "|---|---|---|---|"
    scored = {s.name: s for s in rescored.exports} if rescored else {}
    if rescored:
        m = rescored.metric.upper()
        head += f" {m} | change | seconds | long-file {m} | timestamps |"
        rule += "---|---|---|---|---|"
    rows = [head, rule]
    if rescored:
        src = rescored.source
        lf = src.long_file
        rows.append(
            f"| source (transformers) | transformers | | | {100 * src.score.normalized:.2f}% | "
            f"| {src.seconds:.1f} | {_long(lf)} | {_times(lf)} |"
        )
    for w in written:
        f = FORMATS[w.format]
        row = f"| {w.format} | {f.engine} | `{f.loads_with}` | {w.size_mb:.0f} |"
        if (s := scored.get(w.format)) is not None:
            row += (
                f" {100 * s.score.normalized:.2f}% | {100 * rescored.difference(s):+.2f} |"
                f" {s.seconds:.1f} | {_long(s.long_file)} | {_times(s.long_file)} |"
            )
        rows.append(row)
    note = ""
    if rescored:
        note = (
            f"\n\nRe-scored on {rescored.n_rows} clips ({rescored.source.score.normalizer}), "
            f"each format in its own engine, greedy; the long file is {rescored.long_file_s:.0f}"
            f" s ({rescored.long_file_clips} clips joined with silence) with timestamps."
        )
    return "\n".join(rows) + note


def write_export_cards(
    source_folder: Path | None,
    model_spec: str,
    language: str | None,
    out: Path,
    written: list[Written],
    rescored: Rescore | None,
) -> list[Path]:
    """README.md into OUT and into each format's folder: the source's card (or a plain
    one for a model that has none) with the Exports section set."""
    source_card = Path(source_folder) / CARD if source_folder else None
    if source_card is not None and source_card.is_file():
        card = source_card.read_text(encoding="utf-8")
    else:
        card = plain_card(model_spec, language)
    text = with_exports(card, exports_table(written, rescored))
    paths = []
    for folder in dict.fromkeys([Path(out), *(w.out for w in written)]):
        path = folder / CARD
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def _long(lf) -> str:
    return f"{100 * lf.score.normalized:.2f}%" if lf else ""


def _times(lf) -> str:
    if lf is None:
        return ""
    return f"{lf.segments} segments, " + ("in order" if lf.times_ok else "OUT OF ORDER")
