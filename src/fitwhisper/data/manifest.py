"""Manifests: the list of (audio, transcript) rows to train or score on.

Accepted: a JSON list `[{"audio_path": ..., "text": ...}]`, JSONL, CSV/TSV, a Hugging Face
`audiofolder` (a folder with metadata.csv or metadata.jsonl and a `file_name` column) and a
`datasets` dataset written by `save_to_disk`. Relative audio paths resolve against the
manifest's folder. Rows hold references to audio, never audio, so large manifests stay light.

Long recordings: a row may point into one (`offset` and `duration`, NeMo's names, in
seconds; `duration` alone is NeMo's length metadata and cuts nothing) or carry its timed
`segments` (data/segments.py), and a folder of recordings with an .srt or .vtt file of the
same name beside each is a manifest of such rows. `train` cuts them into 30 s windows
(data/recordings.py).

A row that cannot be read (bad JSON, a missing field, text that is not UTF-8) becomes a row
with a `problem` for `check-data` to report; only a file that is not a manifest at all raises.
"""

from __future__ import annotations

import csv
import itertools
import json
import logging
import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from fitwhisper.config import AUDIO_COLUMNS, TEXT_COLUMNS
from fitwhisper.data.audio import InMemoryAudio
from fitwhisper.data.segments import (
    SEGMENT_COLUMNS,
    Segment,
    SegmentsError,
    joined_text,
    parse_segments,
    read_span,
)
from fitwhisper.errors import DataError

log = logging.getLogger(__name__)

ID_COLUMNS = ("id", "utt_id", "key")
# Who speaks in a row, where a manifest says it (Common Voice's client_id): training gives
# a clip its speaker's previous clip as context (data/recordings.py speaker_context).
SPEAKER_COLUMNS = ("speaker", "speaker_id", "client_id")

# Row-level parse problems; `check` adds the audio and text ones.
UNPARSABLE_ROW = "unparsable_row"
MISSING_FIELD = "missing_field"
BAD_ENCODING = "bad_encoding"

_FORMATS_HINT = (
    "a manifest is a .json list, .jsonl (NeMo's too), .csv or .tsv file, an audiofolder (a "
    "folder with metadata.csv or metadata.jsonl), a folder written by datasets' save_to_disk "
    "or a folder of recordings with an .srt or .vtt file of the same name beside each; "
    "data may also be tar shards (DIR/*.tar, a folder made by `fitwhisper shard`) or a Hub "
    "dataset (hf://ORG/NAME:CONFIG@SPLIT, or a folder in the Hub's layout)"
)


@dataclass(slots=True)
class Row:
    """One (audio, transcript) pair of a manifest.

    Attributes:
        index: 0-based position among the manifest's rows.
        line: where a person finds it: the 1-based line of a JSON/JSONL/CSV file (CSV counts
            the header), or the 1-based row number of a `datasets` dataset.
        audio: absolute path of the audio file, an `InMemoryAudio` for clips stored inside a
            dataset, or None when the row names no audio.
        text: the transcript (None when missing; undecodable bytes shown as U+FFFD).
        language: the row's own language code, when the manifest has a language column.
        id: the manifest's id column, else the audio reference as written.
        problem: a parse problem (`unparsable_row`, `missing_field`, `bad_encoding`) or None.
        detail: what exactly, for the report.
        offset_s: where the row's audio starts in a longer recording (NeMo's `offset`);
            None: the whole file.
        duration_s: how long the row's audio lasts from `offset_s` (NeMo's `duration`,
            read only beside an offset); None: to the end of the file.
        segments: timed segments of the row's audio (a `segments` column, or an SRT/VTT
            file beside the recording), in seconds from its start (from `offset_s`);
            None: the row is one clip with one transcript.
        previous_text: the text before this row in the same recording (a window cut from a
            long recording, data/recordings.py) or, for a clip, its speaker's previous
            clip's, for training with it as Whisper's `<|startofprev|>` context; None where
            there is none.
        speaker: the manifest's speaker column (SPEAKER_COLUMNS), None without one.
        header_only: the data check read only this row's audio header (`train --check
            sample:N`): training checks its samples as it loads them (data/late_check.py).
    """

    index: int
    line: int
    audio: Path | InMemoryAudio | None
    text: str | None
    language: str | None = None
    id: str = ""
    problem: str | None = None
    detail: str | None = None
    offset_s: float | None = None
    duration_s: float | None = None
    segments: tuple[Segment, ...] | None = None
    previous_text: str | None = None
    header_only: bool = False
    speaker: str | None = None


@dataclass
class Manifest:
    """A loaded manifest: its rows and how they were read."""

    path: Path
    format: str  # json | jsonl | csv | tsv | audiofolder | datasets | subtitled
    rows: list[Row]  # or a one-pass iterator: load_manifest(lazy=True)
    audio_column: str
    text_column: str
    language_column: str | None
    columns: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    def where(self, row: Row) -> str:
        """`train.jsonl:17`, the way error messages and reports name a row (a subtitled
        recording: `talk.wav`, whose .srt or .vtt lies beside it)."""
        if self.format == "subtitled":
            return row.id
        return f"{self.path.name}:{row.line}"


def load_manifest(
    path: str | os.PathLike,
    audio_column: str | None = None,
    text_column: str | None = None,
    language_column: str | None = "language",
    audio_dir: str | os.PathLike | None = None,
    lazy: bool = False,
) -> Manifest:
    """Read a manifest's rows (no audio is read).

    Args:
        path: a manifest file, an audiofolder or a `save_to_disk` folder.
        audio_column: column with the audio; None picks the first of `AUDIO_COLUMNS` present.
        text_column: column with the transcript; None picks the first of `TEXT_COLUMNS`.
        language_column: optional per-row language column; ignored when absent.
        audio_dir: the folder relative audio paths resolve against (None: the manifest's).
        lazy: `rows` a one-pass iterator, each row read when it is reached (memory that
            does not grow with the rows; a `save_to_disk` folder is read whole even so).

    Raises:
        DataError: no such file, not a manifest, no rows, or the named columns are absent.
    """
    from fitwhisper.data.sources.spec import parse_source

    spec = parse_source(path)
    if spec.weight is not None:
        raise DataError(
            f"{spec.text}: a weight (:{spec.weight:g}) is a source's share in a mix of "
            "streamed sources (`train --train_manifest A:0.7 --train_mix B:0.3`); this reads "
            "one source whole",
            hint=f"pass {spec.name} without the weight",
        )
    if spec.kind != "manifest":
        from fitwhisper.data.sources.records import source_records

        fmt, base, records = source_records(spec)
        where, base = Path(spec.location).expanduser(), _base(audio_dir, base)
        return _build(where, fmt, records, base, audio_column, text_column, language_column, lazy)
    p = Path(spec.location).expanduser()
    if not p.exists():
        raise DataError(f"manifest {p} not found", hint=_FORMATS_HINT)
    if (kind := special_file_kind(p)) is not None:
        raise DataError(
            f"manifest {p} is {kind}, not a file or folder: not read",
            hint=_FORMATS_HINT + "; save a stream to a file first",
        )
    if p.is_dir():
        return _load_folder(p, audio_column, text_column, language_column, audio_dir, lazy)
    fmt, records = _file_records(p)
    base = _base(audio_dir, p.parent)
    return _build(p, fmt, records, base, audio_column, text_column, language_column, lazy)


def _base(audio_dir: str | os.PathLike | None, default: Path) -> Path:
    """The folder relative audio paths resolve against: --audio_dir, else the manifest's."""
    return Path(os.path.abspath(Path(audio_dir).expanduser())) if audio_dir else default


def _file_records(p: Path) -> tuple[str, Iterator[_Record]]:
    """A manifest file's format and its records, by its suffix."""
    suffix = p.suffix.lower()
    if suffix in (".csv", ".tsv", ".tab"):
        fmt = "csv" if suffix == ".csv" else "tsv"
        return fmt, _read_csv(p, delimiter="," if fmt == "csv" else "\t")
    if suffix in (".json", ".jsonl", ".ndjson"):
        fmt = "json" if suffix == ".json" and _first_char(p) == "[" else "jsonl"
        return fmt, _read_json_list(p) if fmt == "json" else _read_jsonl(p)
    raise DataError(f"{p}: unknown manifest type '{suffix or p.name}'", hint=_FORMATS_HINT)


def special_file_kind(path: str | os.PathLike) -> str | None:
    """'a FIFO', 'a character device', ... for a path that is neither a regular file nor a
    folder (None for those, and for a path that does not exist). Looked up with stat, never
    opened: a FIFO would block the reader forever and /dev/zero never ends."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kinds = (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


T = TypeVar("T")


def select(rows: Sequence[T], n: int | None) -> list[T]:
    """The first `n` rows (all when `n` is None): `max_train_samples` / `max_eval_samples`."""
    return list(rows) if n is None else list(rows[: max(0, n)])


def file_records(path: Path) -> list[dict | None]:
    """The rows of a manifest file as written, in `load_manifest`'s order (None for a row it
    could not read): the columns it does not use too, such as a speaker.

    Raises:
        DataError: a folder (audiofolder, `save_to_disk`) rather than a file.
    """
    if path.is_dir():
        raise DataError(
            f"{path} is not a manifest file: its rows cannot be written out again",
            hint="write the rows as a .jsonl, .json or .csv file",
        )
    return [obj for _, obj, _ in _file_records(path)[1]]


# --- records: (line, dict | None, problem detail) from each format ----------------------

_Record = tuple[int, dict[str, Any] | None, str | None]


def _first_char(path: Path) -> str:
    with path.open("rb") as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head[:1].decode("ascii", errors="replace")


def _open_text(path: Path):
    # surrogateescape keeps undecodable bytes as lone surrogates, so one bad row is reported
    # as `bad_encoding` instead of the whole file failing; utf-8-sig drops an Excel BOM.
    return path.open(encoding="utf-8-sig", errors="surrogateescape", newline="")


def _read_jsonl(path: Path) -> Iterator[_Record]:
    with _open_text(path) as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                yield line_no, None, f"not valid JSON: {e.msg} at column {e.colno}"
                continue
            if not isinstance(obj, dict):
                yield line_no, None, f"expected a JSON object, got {type(obj).__name__}"
                continue
            yield line_no, obj, None


def _read_json_list(path: Path) -> Iterator[_Record]:
    with _open_text(path) as f:
        text = f.read()
    # Walk the list element by element so each row knows the line it starts on.
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    line_no, counted = 1, 0
    while True:
        pos = _skip_ws(text, pos)
        if pos < len(text) and text[pos] == "]":
            return
        line_no += text.count("\n", counted, pos)
        counted = pos
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise DataError(
                f"{path} is not a valid JSON list: {e.msg} at line {e.lineno} column {e.colno}",
                hint="fix the JSON there, or write one JSON object per line (JSONL), where a "
                "bad line is reported and the rest still load",
            ) from e
        if isinstance(obj, dict):
            yield line_no, obj, None
        else:
            yield line_no, None, f"expected a JSON object, got {type(obj).__name__}"
        pos = _skip_ws(text, end)
        if pos < len(text) and text[pos] == ",":
            pos += 1
        elif pos >= len(text) or text[pos] != "]":
            line_no += text.count("\n", counted, pos)
            raise DataError(
                f"{path} is not a valid JSON list: expected ',' or ']' at line {line_no}",
                hint="fix the JSON there, or write one JSON object per line (JSONL)",
            )


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _read_csv(path: Path, delimiter: str) -> Iterator[_Record]:
    with _open_text(path) as f:
        reader = csv.reader(f, delimiter=delimiter)
        try:
            header = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise DataError(f"{path}: cannot read the header: {e}", hint=_FORMATS_HINT) from e
        header = [h.strip() for h in header]
        end_line = reader.line_num
        while True:
            start_line = end_line + 1
            try:
                values = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                end_line = reader.line_num
                yield start_line, None, f"not valid CSV: {e}"
                continue
            end_line = reader.line_num
            if not values or all(not v.strip() for v in values):
                continue
            if len(values) > len(header):
                yield (
                    start_line,
                    None,
                    f"{len(values)} fields but the header has {len(header)} "
                    f"(an unquoted '{delimiter}' in the text?)",
                )
                continue
            yield start_line, dict(zip(header, values, strict=False)), None


# --- folders ------------------------------------------------------------------------------


def _load_folder(
    folder: Path,
    audio_column: str | None,
    text_column: str | None,
    language_column: str | None,
    audio_dir: str | os.PathLike | None,
    lazy: bool = False,
) -> Manifest:
    if (folder / "dataset_info.json").is_file() or (folder / "state.json").is_file():
        return _load_saved_dataset(folder, audio_column, text_column, language_column)
    if (folder / "dataset_dict.json").is_file():
        splits = json.loads((folder / "dataset_dict.json").read_text()).get("splits", [])
        raise DataError(
            f"{folder} holds several splits ({', '.join(splits)}), not one dataset",
            hint=f"pass one of them, e.g. {folder / (splits[0] if splits else 'train')}",
        )
    for name, reader in (
        ("metadata.csv", lambda p: _read_csv(p, ",")),
        ("metadata.jsonl", _read_jsonl),
        ("metadata.tsv", lambda p: _read_csv(p, "\t")),
    ):
        meta = folder / name
        if meta.is_file():
            audio_column = audio_column or "file_name"  # audiofolder's own convention
            return _build(
                meta,
                "audiofolder",
                reader(meta),
                _base(audio_dir, folder),
                audio_column,
                text_column,
                language_column,
                lazy,
            )
    subtitled = _load_subtitled(folder)
    if subtitled is not None:
        return subtitled
    raise DataError(
        f"{folder} is a folder without metadata.csv or metadata.jsonl, and without "
        "recordings with an .srt or .vtt file of the same name beside them",
        hint=_FORMATS_HINT,
    )


def _load_subtitled(folder: Path) -> Manifest | None:
    """A folder of recordings, each with its subtitles beside it (`talk.wav` + `talk.srt`
    or `talk.vtt`): one row per recording, its segments from the subtitle file. None when
    the folder holds no such pair. A subtitle file that cannot be read makes its row
    unparsable (reported by the data check), not the folder."""
    from fitwhisper.data.subtitles import SubtitleError, read_subtitles, subtitled_recordings

    pairs = subtitled_recordings(folder)
    if not pairs:
        return None
    rows = []
    for i, (audio, subs) in enumerate(pairs):
        rid = str(audio.relative_to(folder))
        try:
            segments = read_subtitles(subs)
        except SubtitleError as e:
            rows.append(Row(i, i + 1, audio, None, None, rid, UNPARSABLE_ROW, str(e)))
            continue
        rows.append(Row(i, i + 1, audio, joined_text(segments), None, rid, segments=segments))
    return Manifest(folder, "subtitled", rows, "audio", "subtitles", None, ["audio", "subtitles"])


def _load_saved_dataset(
    folder: Path, audio_column: str | None, text_column: str | None, language_column: str | None
) -> Manifest:
    import datasets

    try:
        ds = datasets.load_from_disk(str(folder))
    except Exception as e:  # datasets raises FileNotFoundError, ValueError, ArrowInvalid, ...
        raise DataError(f"cannot load the saved dataset {folder}: {e}", hint=_FORMATS_HINT) from e
    if isinstance(ds, datasets.DatasetDict):
        raise DataError(
            f"{folder} holds several splits ({', '.join(ds)}), not one dataset",
            hint=f"pass one of them, e.g. {folder / next(iter(ds), 'train')}",
        )
    columns = list(ds.column_names)
    audio_col = _pick(columns, audio_column, AUDIO_COLUMNS, "audio", folder)
    text_col = _pick(columns, text_column, TEXT_COLUMNS, "text", folder)
    lang_col = language_column if language_column in columns else None
    id_col = next((c for c in ID_COLUMNS if c in columns), None)
    audio_feature = ds.features[audio_col]
    if isinstance(audio_feature, datasets.Audio):
        # decode=False yields {"path", "bytes"}; decoding is ours (datasets 4+ would need
        # torchcodec, which CPU installs lack).
        ds = ds.cast_column(audio_col, datasets.Audio(decode=False))
    light = [c for c in (text_col, lang_col, id_col) if c]
    rows: list[Row] = []
    # Read the light columns in batches; the audio column is touched per row only for its
    # path, so embedded bytes or arrays stay in the memory-mapped Arrow file.
    audio_refs = _audio_refs(ds, audio_col)
    for start, batch in _batches(ds.select_columns(light)):
        for j in range(len(batch[text_col])):
            i = start + j
            rows.append(
                _dataset_row(
                    ds,
                    folder,
                    i,
                    audio_col,
                    audio_refs[i],
                    batch[text_col][j],
                    batch[lang_col][j] if lang_col else None,
                    batch[id_col][j] if id_col else None,
                )
            )
    if not rows:
        raise DataError(f"the dataset {folder} has no rows", hint=_FORMATS_HINT)
    return Manifest(folder, "datasets", rows, audio_col, text_col, lang_col, columns)


def _audio_refs(ds, column: str) -> list[tuple[str | None, bool]]:
    """Per row: (path as stored, whether the clip's bytes or samples are in the dataset).

    `save_to_disk` embeds the bytes of an `Audio` column and keeps only the file's name, so
    most saved datasets carry their audio; a plain string column holds paths.
    """
    import pyarrow as pa

    column_data = ds.data.column(column)  # pyarrow ChunkedArray, memory-mapped
    kind = column_data.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return [(p, False) for p in column_data.to_pylist()]
    if not pa.types.is_struct(kind):
        return [(None, True)] * len(column_data)
    names = [kind.field(k).name for k in range(kind.num_fields)]
    out: list[tuple[str | None, bool]] = []
    for chunk in column_data.chunks:
        # Child arrays of a struct are views; only validity flags and paths are copied.
        paths = chunk.field("path").to_pylist() if "path" in names else [None] * len(chunk)
        stored = [chunk.field(n).is_valid().to_pylist() for n in ("bytes", "array") if n in names]
        out.extend((paths[i], any(s[i] for s in stored)) for i in range(len(chunk)))
    return out


def _batches(ds, size: int = 1000) -> Iterator[tuple[int, dict]]:
    for start in range(0, len(ds), size):
        yield start, ds[start : start + size]


def _dataset_row(ds, folder, i, audio_col, audio_ref, text, language, row_id) -> Row:
    path, stored = audio_ref
    audio: Path | InMemoryAudio | None = None
    if stored:
        name = f"{folder.name}[{i}]" + (f" ({path})" if path else "")
        audio = InMemoryAudio(name, dataset=ds, index=i, column=audio_col)
    elif path:
        audio = _resolve(str(path), folder)
    problem = detail = None
    if audio is None:
        problem, detail = MISSING_FIELD, f"no audio in column '{audio_col}'"
    text, problem, detail = _text(text, problem, detail)
    rid = str(row_id) if row_id is not None else (path or str(i))
    return Row(i, i + 1, audio, text, _lang(language), rid, problem, detail)


# --- records -> rows ----------------------------------------------------------------------


_COLUMN_SAMPLE_ROWS = 100  # readable rows whose keys decide the columns of a JSON manifest


def _build(
    path: Path,
    fmt: str,
    records: Iterable[_Record],
    base: Path,
    audio_column: str | None,
    text_column: str | None,
    language_column: str | None,
    lazy: bool = False,
) -> Manifest:
    records = iter(records)
    head = list(itertools.islice(records, _COLUMN_SAMPLE_ROWS))
    maker = RowMaker.for_records(head, path, base, audio_column, text_column, language_column)
    rows = (maker.row(i, *record) for i, record in enumerate(itertools.chain(head, records)))
    rows = rows if lazy else list(rows)
    return Manifest(path, fmt, rows, maker.audio_col, maker.text_col, maker.lang_col, maker.columns)


@dataclass(frozen=True)
class RowMaker:
    """Records (a manifest's parsed rows) to `Row`s, with the columns chosen once."""

    base: Path
    audio_col: str
    text_col: str
    lang_col: str | None
    id_col: str | None
    columns: list[str]
    seg_col: str | None = None  # timed segments of a long recording (data/segments.py)
    speaker_col: str | None = None

    @classmethod
    def for_records(
        cls,
        head: list[_Record],
        path: Path,
        base: Path,
        audio_column: str | None,
        text_column: str | None,
        language_column: str | None,
    ) -> RowMaker:
        """The columns, from the first records (a CSV's header; JSON rows may leave optional
        keys out, so a single incomplete row cannot hide a column).

        Raises:
            DataError: no records, none readable, or a named or needed column absent.
        """
        columns = list(dict.fromkeys(k for _, obj, _ in head if obj is not None for k in obj))
        if not head:
            raise DataError(f"manifest {path} has no rows", hint=_FORMATS_HINT)
        if not columns:
            line, _, detail = head[0]
            raise DataError(
                f"no row of {path} could be read; line {line}: {detail}", hint=_FORMATS_HINT
            )
        seg_col = next((c for c in SEGMENT_COLUMNS if c in columns), None)
        # Rows with segments need no transcript column: their text is their segments'.
        needs_text = text_column or seg_col is None or any(c in columns for c in TEXT_COLUMNS)
        return cls(
            base,
            _pick(columns, audio_column, AUDIO_COLUMNS, "audio", path),
            _pick(columns, text_column, TEXT_COLUMNS, "text", path) if needs_text else "",
            language_column if language_column in columns else None,
            next((c for c in ID_COLUMNS if c in columns), None),
            columns,
            seg_col,
            next((c for c in SPEAKER_COLUMNS if c in columns), None),
        )

    def row(self, index: int, line: int, obj: dict | None, parse_error: str | None) -> Row:
        if obj is None:
            return Row(index, line, None, None, problem=UNPARSABLE_ROW, detail=parse_error)
        row = _row(
            obj, index, line, self.base, self.audio_col, self.text_col, self.lang_col, self.id_col
        )
        if self.speaker_col:
            row.speaker = _speaker(obj.get(self.speaker_col))
        return _with_span(row, obj, self.seg_col)


def _with_span(row: Row, obj: dict, seg_col: str | None) -> Row:
    """The row with its offset, duration and segments, where the manifest gives them."""
    try:
        row.offset_s, row.duration_s = read_span(obj)
    except SegmentsError as e:
        if row.problem is None:
            row.problem, row.detail = UNPARSABLE_ROW, str(e)
    raw = obj.get(seg_col) if seg_col else None
    if raw is None or raw == "":
        return row
    try:
        row.segments = parse_segments(raw)
    except SegmentsError as e:
        if row.problem is None or row.problem == MISSING_FIELD:
            row.problem, row.detail = UNPARSABLE_ROW, f"'{seg_col}': {e}"
        return row
    # No transcript of its own (or an empty one): the segments' text is the row's.
    blank = row.text is None or not row.text.strip()
    if blank and row.problem in (None, MISSING_FIELD) and row.audio is not None:
        row.text = joined_text(row.segments)
        row.problem = row.detail = None
    return row


def _pick(
    columns: list[str], wanted: str | None, aliases: tuple[str, ...], kind: str, where: Path
) -> str:
    flag = f"--{kind}_column"
    if wanted:
        if wanted in columns:
            return wanted
        raise DataError(
            f"{where} has no column '{wanted}'; its columns are: {', '.join(columns)}",
            hint=f"name the {kind} column with {flag}",
        )
    found = next((c for c in aliases if c in columns), None)
    if found is None:
        raise DataError(
            f"{where} has no {kind} column (looked for {', '.join(aliases)}); "
            f"its columns are: {', '.join(columns)}",
            hint=f"name the {kind} column with {flag}",
        )
    return found


def _row(obj: dict, index, line, base, audio_col, text_col, lang_col, id_col) -> Row:
    problem = detail = None
    raw_audio = obj.get(audio_col)
    audio: Path | InMemoryAudio | None = None
    if isinstance(raw_audio, InMemoryAudio):  # a clip in a tar shard (data/sources/)
        audio, raw_audio = raw_audio, raw_audio.name
    elif isinstance(raw_audio, dict) and (raw_audio.get("bytes") or raw_audio.get("array")):
        audio = InMemoryAudio(f"row {line}", value=raw_audio)
    elif isinstance(raw_audio, dict):
        raw_audio = raw_audio.get("path")
    if audio is None and isinstance(raw_audio, str) and raw_audio.strip():
        if _has_surrogates(raw_audio):
            problem, detail = BAD_ENCODING, f"audio path {_repair(raw_audio)!r} is not UTF-8"
        audio = _resolve(_repair(raw_audio.strip()), base)
    elif audio is None:
        problem, detail = MISSING_FIELD, f"no audio path in '{audio_col}'"
    text_value = obj.get(text_col, _ABSENT) if text_col else _ABSENT
    text, problem, detail = _text(text_value, problem, detail, text_col or "text")
    raw_id = obj.get(id_col) if id_col else None
    if raw_id is None:
        raw_id = raw_audio if isinstance(raw_audio, str) else line
    return Row(
        index,
        line,
        audio,
        text,
        _lang(obj.get(lang_col) if lang_col else None),
        _repair(str(raw_id)),
        problem,
        detail,
    )


_ABSENT = object()


def _text(value, problem, detail, column: str = "text"):
    if value is _ABSENT or value is None:
        if problem is None:
            problem, detail = MISSING_FIELD, f"no transcript in '{column}'"
        return None, problem, detail
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        if problem is None:
            problem = UNPARSABLE_ROW
            detail = f"transcript is a {type(value).__name__}, not text"
        return None, problem, detail
    text = str(value)
    if _has_surrogates(text):
        if problem is None:
            problem = BAD_ENCODING
            detail = "transcript is not valid UTF-8 (saved as Big5/GBK/Latin-1? convert with iconv)"
        text = _repair(text)
    return text, problem, detail


def _speaker(value) -> str | None:
    """A speaker column's value as text (ids may be numbers); None where it is empty."""
    if value is None or isinstance(value, bool) or not isinstance(value, str | int):
        return None
    return _repair(str(value).strip()) or None


def _lang(value) -> str | None:
    if value is None or not isinstance(value, str) or not value.strip():
        return None
    return _repair(value.strip())


def _resolve(value: str, base: Path) -> Path:
    p = Path(value).expanduser()
    return Path(os.path.abspath(p if p.is_absolute() else base / p))


def _has_surrogates(text: str) -> bool:
    try:
        text.encode("utf-8")  # lone surrogates (our undecodable bytes) refuse to encode
    except UnicodeEncodeError:
        return True
    return False


# Surrogates that stand for no byte: a JSON "\ud800" escape, not an undecodable byte.
_LONE_SURROGATE = re.compile("[\ud800-\udc7f\udd00-\udfff]")


def _repair(text: str) -> str:
    """Undecodable bytes (kept as surrogates) and lone surrogates shown as U+FFFD."""
    if not _has_surrogates(text):
        return text
    text = _LONE_SURROGATE.sub("\ufffd", text)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
