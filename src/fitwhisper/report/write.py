"""`write_report`: a run or evaluation folder (or two) read and the page written, with the
checks of its output, and `report_quietly` for the page `train` and `evaluate` write."""

from __future__ import annotations

import logging
from pathlib import Path

from fitwhisper.errors import ConfigError
from fitwhisper.report.unreadable import collecting

log = logging.getLogger(__name__)

REPORT_FILE = "report.html"


def write_report(
    folder: str | Path,
    other: str | Path | None = None,
    *,
    output: str | Path | None = None,
    embed_audio: bool = False,
    unreadable: list[str] | None = None,
) -> Path:
    """Write the report of `folder` (a run or evaluation folder), or of `folder` against
    `other`; returns the file written (default FOLDER/report.html, or
    FOLDER/compare-OTHER.html for two). Files that exist but cannot be read are left out
    of the page and named in `unreadable` ("PATH (why)"), when given, and in the log.

    Raises:
        ConfigError: a folder that holds neither a run nor an evaluation, or two folders to
            compare of which one holds no scored clips.
    """
    from fitwhisper.report.compare import gather_pair
    from fitwhisper.report.gather import gather, kind_of
    from fitwhisper.report.render import render

    first = _checked(Path(folder))
    second = _checked(Path(other)) if other is not None else None
    out = check_report_output(first, second, output)
    out.parent.mkdir(parents=True, exist_ok=True)
    with collecting() as found:
        if second is not None:
            _has_clips(first, second)
            data = gather_pair(first, second, out.parent, embed_audio=embed_audio)
        elif kind_of(first) == "comparison":  # evaluate --compare: baseline against model
            baseline, model = _compared_folders(first)
            data = gather_pair(baseline, model, out.parent, embed_audio=embed_audio)
        else:
            data = gather(first, out.parent, embed_audio=embed_audio)
    for entry in found:
        log.warning("could not read %s; the page leaves it out", entry)
    if unreadable is not None:
        unreadable.extend(found)
    tmp = out.with_name(out.name + ".partial")
    tmp.write_text(render(data), encoding="utf-8")
    tmp.replace(out)
    return out


def check_report_output(
    folder: str | Path, other: str | Path | None = None, output: str | Path | None = None
) -> Path:
    """The page's path (`write_report`'s default when `output` is None), passed by the
    output guard: never one of the files the page is made from (the folder itself holds
    the page), and an existing file only when it is a page; ConfigError otherwise."""
    from fitwhisper.output_guard import Output, check_outputs

    if output is None:
        name = f"compare-{Path(other).resolve().name}.html" if other else REPORT_FILE
        output = Path(folder) / name
    read = [(str(f), f) for d in (folder, other) if d for f in _read_files(Path(d))]
    check_outputs([Output("--output", output, "file", suffixes=(".html", ".htm"))], read)
    return Path(output)


def _read_files(folder: Path) -> list[Path]:
    """The files a page may be made from: those in the folder and one level down (eval/,
    final/, a comparison's model folders), pages excepted."""
    found = []
    for pattern in ("*", "*/*"):
        found += [f for f in folder.glob(pattern) if f.suffix not in (".html", ".htm")]
    return found


def report_quietly(folder: str | Path) -> Path | None:
    """`write_report` at the end of a run: a failure never undoes the run (its model and
    scores are written), but it is logged as an error with its cause and the command that
    writes the page again."""
    try:
        path = write_report(folder)
    except Exception as e:  # the report must never fail the run it describes
        log.error(
            "could not write the HTML report of %s: %s; `fitwhisper report %s` writes it "
            "once that is fixed",
            folder,
            e,
            folder,
        )
        return None
    return path


def _compared_folders(folder: Path) -> tuple[Path, Path]:
    """The baseline's and the model's folders of `evaluate --compare --output_dir`, by the
    model names comparison.json and each folder's metrics.json hold."""
    import json

    names = json.loads((folder / "comparison.json").read_text(encoding="utf-8"))
    found = {}
    for sub in sorted(p for p in folder.iterdir() if (p / "metrics.json").is_file()):
        found.setdefault(json.loads((sub / "metrics.json").read_text())["model"], sub)
    baseline, model = names["baseline"]["name"], names["model"]["name"]
    if baseline == model or {baseline, model} - set(found):
        subs = sorted(found.values())  # the same model twice: X-baseline/, X-model/
        return subs[0], subs[-1]
    return found[baseline], found[model]


def _has_clips(*folders: Path) -> None:
    """Two folders side by side are compared clip by clip: each must hold scored clips."""
    from fitwhisper.report.compare import predictions_file

    without = [str(f) for f in folders if not predictions_file(f).is_file()]
    if without:
        raise ConfigError(
            f"{' and '.join(without)} hold{'s' if len(without) == 1 else ''} no scored clips "
            "(no eval/predictions.jsonl): a comparison puts two runs' held-out clips side "
            "by side",
            hint="train with --eval_manifest, or score each model with `fitwhisper evaluate "
            "MODEL MANIFEST --output_dir DIR` and compare those folders; `fitwhisper report "
            "RUN_DIR` writes one run's page",
        )


def _checked(folder: Path) -> Path:
    from fitwhisper.report.gather import kind_of

    if not folder.is_dir() or not kind_of(folder):
        raise ConfigError(
            f"{folder} is not a run folder or an evaluation folder",
            hint="give the folder `fitwhisper train --output_dir` wrote (it holds "
            "fitwhisper.yaml), or the one `fitwhisper evaluate --output_dir` wrote (it holds "
            "predictions.jsonl)",
        )
    return folder
