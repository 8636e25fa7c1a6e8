"""Long recordings with timed segments cut into training windows of up to 30 s, and the
labels a window trains with: Whisper's timestamp format or plain text, with or without the
recording's previous text as `<|startofprev|>` context.

The cut, for each row with segments (data/segments.py), segments in time order:

- a window starts where its first segment starts (rounded down to the 20 ms timestamp
  step) and takes the segments after it while each ends within 30 s of that start and the
  label stays within `max_label_tokens`;
- a segment that straddles the window's end (it would end past the 30 s) is not cut: it
  moves to the next window, which starts with it; the window's audio ends where its last
  whole segment ends, so no text is trained against audio that lacks it and no audio
  holds speech its label leaves out;
- a segment that fits no window (longer than 30 s, or its text alone past the token limit)
  is left out, counted by reason and named in the log and RUN/data_report.json; the
  recording's other segments are used. Nothing is dropped without being counted.

The labels follow `data/packing.py`'s timestamp format (segment times relative to the
window's start, `<|t0|> text<|t1|>` per segment with Whisper's leading space where the
script has spaces, no `<|notimestamps|>`), the format of Whisper's pre-training and of
distil-whisper's training data. With a window's previous
text as context, the decoder reads `<|startofprev|> previous text <|startoftranscript|>
...` and the loss is taken on the target alone (labels -100 over the context), as
Whisper's `condition_on_previous_text` and `initial_prompt` feed it at inference.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from fitwhisper.data.manifest import Row
from fitwhisper.data.segments import Segment
from fitwhisper.data.timestamp_tokens import has_timestamp_tokens, timestamp_id
from fitwhisper.text_joins import join_texts, leading_space
from fitwhisper.whisper_facts import TIMESTAMP_SECONDS, WINDOW_SECONDS

log = logging.getLogger(__name__)

# Whisper's decoder holds 448 positions; a prompt gets at most half of them less one, as
# openai-whisper's transcribe keeps it (`n_text_ctx // 2 - 1`).
MAX_DECODER_TOKENS = 448
MAX_PREVIOUS_TOKENS = MAX_DECODER_TOKENS // 2 - 1
# How much of a recording's earlier text a window keeps as its context (characters; the
# tokens are cut to MAX_PREVIOUS_TOKENS when the label is made).
PREVIOUS_TEXT_CHARS = 1000
_PREFIX_TOKENS = 4  # <|startoftranscript|><|lang|><|task|> ... <|endoftext|>

LEFT_OUT = {
    "segment_too_long": f"longer than one {WINDOW_SECONDS:.0f} s window",
    "segment_label_too_long": "its text alone is longer than --max_label_tokens",
}


@dataclass
class CutReport:
    """What cutting the long recordings made and left out."""

    recordings: int = 0
    windows: int = 0
    segments: int = 0  # in windows
    left_out: Counter = field(default_factory=Counter)  # reason (a LEFT_OUT key) -> segments
    examples: list[str] = field(default_factory=list)  # the first few left out, named

    def summary(self) -> dict:
        """What data_report.json records."""
        return {
            "recordings": self.recordings,
            "windows": self.windows,
            "segments_in_windows": self.segments,
            "segments_left_out": dict(self.left_out),
            "left_out_examples": self.examples,
        }

    def describe(self) -> str:
        """One log line."""
        line = (
            f"cut {self.recordings} long recording(s) into {self.windows} training window(s) "
            f"of up to {WINDOW_SECONDS:.0f} s holding {self.segments} segment(s) (a segment "
            "straddling a window's end starts the next window)"
        )
        if self.left_out:
            reasons = ", ".join(f"{n} {LEFT_OUT[k]}" for k, n in self.left_out.items())
            line += f"; left out {sum(self.left_out.values())} segment(s): {reasons}"
            line += " (" + "; ".join(self.examples) + ")"
        return line


def cut_recordings(
    rows: Sequence[Row],
    durations_s: Sequence[float],
    tokenizer,
    *,
    max_label_tokens: int = MAX_DECODER_TOKENS,
    where=lambda row: f"row {row.line}",
) -> tuple[list[Row], list[float], CutReport]:
    """Rows with segments replaced by their windows (in place, in order); other rows and
    their durations as they are.

    Args:
        durations_s: each row's duration (the data check's), one per row.
        tokenizer: counts each segment's tokens against `max_label_tokens` (None: not
            counted, as the data check without a model).
        where: names a row in the report (`train.jsonl:17`).

    Returns:
        (rows, durations, report); a window row has `offset_s`/`duration_s` into its
        recording, its segments relative to its start, their text joined as its `text`,
        and the recording's text before it as `previous_text`.
    """
    out_rows: list[Row] = []
    out_s: list[float] = []
    report = CutReport()
    for row, duration in zip(rows, durations_s, strict=True):
        if row.segments is None:
            out_rows.append(row)
            out_s.append(duration)
            continue
        report.recordings += 1
        for window in _windows(row, tokenizer, max_label_tokens, report, where(row)):
            out_rows.append(window)
            out_s.append(window.duration_s)
    return out_rows, out_s, report


def _windows(row: Row, tokenizer, max_tokens: int, report: CutReport, where: str):
    segments = sorted(row.segments, key=lambda s: s.start)  # the check reports disorder
    tokens = [
        2 + (len(tokenizer(s.text, add_special_tokens=False).input_ids) if tokenizer else 0)
        for s in segments
    ]
    base = row.offset_s or 0.0
    i = 0
    while i < len(segments):
        reason = _unfit(segments[i], tokens[i], max_tokens)
        if reason:
            report.left_out[reason] += 1
            if len(report.examples) < 5:
                s = segments[i]
                report.examples.append(f"{where} {s.start:.2f}-{s.end:.2f} s: {LEFT_OUT[reason]}")
            i += 1
            continue
        start = _step_floor(segments[i].start)
        j, used = i, _PREFIX_TOKENS
        while (
            j < len(segments)
            and segments[j].end - start <= WINDOW_SECONDS
            and not _unfit(segments[j], tokens[j], max_tokens)
            and used + tokens[j] <= max_tokens
        ):
            used += tokens[j]
            j += 1
        inside = segments[i:j]
        end = inside[-1].end
        previous = join_texts(s.text for s in segments[:i])[-PREVIOUS_TEXT_CHARS:].strip()
        report.windows += 1
        report.segments += len(inside)
        yield replace(
            row,
            id=f"{row.id}@{start:.2f}s",
            offset_s=base + start,
            duration_s=end - start,
            segments=tuple(Segment(s.start - start, s.end - start, s.text) for s in inside),
            text=join_texts(s.text for s in inside),
            previous_text=previous or None,
        )
        i = j


def _unfit(segment: Segment, tokens: int, max_tokens: int) -> str | None:
    if segment.end - segment.start > WINDOW_SECONDS:
        return "segment_too_long"
    if tokens + _PREFIX_TOKENS > max_tokens:
        return "segment_label_too_long"
    return None


def _step_floor(seconds: float) -> float:
    return int(max(0.0, seconds) / TIMESTAMP_SECONDS + 1e-6) * TIMESTAMP_SECONDS


def speaker_context(rows: Sequence[Row]) -> tuple[list[Row], int]:
    """Training clips with their speaker's previous clip's text as `previous_text` (rows in
    the given order; the last PREVIOUS_TEXT_CHARS of it), so clip data trains Whisper's
    context too, as long recordings' windows do: read speech has no recording around a
    clip, and its speaker's last sentence is the nearest thing to what came before. Only
    clips whose manifest names the speaker; windows of long recordings keep their own.
    Returns the rows and how many got a context."""
    last: dict[str, str] = {}
    out, given = [], 0
    for row in rows:
        if row.speaker is None or row.segments is not None or row.previous_text is not None:
            out.append(row)
            continue
        before = last.get(row.speaker)
        if before:
            row = replace(row, previous_text=before[-PREVIOUS_TEXT_CHARS:])
            given += 1
        if row.text and row.text.strip():
            last[row.speaker] = row.text.strip()
        out.append(row)
    return out, given


# --- labels -------------------------------------------------------------------------------


def label_shares(cfg, tokenizer, rows: Sequence[Row]) -> tuple[float, float]:
    """(timestamp share, previous-text share) a run's windows of long recordings train
    with, from its TrainConfig: the options, except where the run cannot use them (said
    once, and only when `rows` hold such windows)."""
    if not any(r.segments is not None or r.previous_text for r in rows):
        return 0.0, 0.0
    timestamps, previous = cfg.segment_timestamp_share, cfg.previous_text_share
    if timestamps > 0 and not has_timestamp_tokens(tokenizer):
        log.warning(
            "--segment_timestamp_share: this tokenizer has no timestamp tokens (<|0.00|> "
            "...), so windows of long recordings train as plain text"
        )
        timestamps = 0.0
    if previous > 0 and cfg.cache_encoder_outputs:
        # The cache keeps labels alone; a window with context needs its decoder input too.
        log.warning(
            "--previous_text_share: not with --cache_encoder_outputs; windows train without"
        )
        previous = 0.0
    return timestamps, previous


def chosen(seed: int, item: int, what: str, share: float) -> bool:
    """Whether training item `item` is one of the `share` drawn for `what` ("timestamps",
    "previous_text"): a fixed draw from the seed and the item alone, so a resumed run, each
    rank and each dataloader worker draw the same, and the two choices are independent."""
    if share <= 0:
        return False
    return random.Random(f"{seed}/{what}/{item}").random() < share


def window_labels(
    tokenizer, row: Row, prefix: list[int], *, timestamped: bool, with_previous: bool
) -> dict[str, list[int]]:
    """A window's `labels`, and `decoder_input_ids` where it trains with its previous text.

    Args:
        prefix: `<|startoftranscript|>[<|lang|><|task|>]<|notimestamps|>` for this row
            (data/features.py prefix_ids).
        timestamped: label its segments with their times (no `<|notimestamps|>`).
        with_previous: put its `previous_text` before the prefix as `<|startofprev|>`
            context, with no loss on it.
    """
    no_ts = tokenizer.convert_tokens_to_ids("<|notimestamps|>")
    if timestamped and row.segments:
        labels = [t for t in prefix if t != no_ts]
        for s in row.segments:
            labels.append(timestamp_id(tokenizer, s.start))
            labels += tokenizer(leading_space(s.text), add_special_tokens=False).input_ids
            labels.append(timestamp_id(tokenizer, min(s.end, WINDOW_SECONDS)))
    else:
        labels = list(prefix) + tokenizer(row.text or "", add_special_tokens=False).input_ids
    labels.append(tokenizer.eos_token_id)
    if not (with_previous and row.previous_text):
        return {"labels": labels}
    room = min(MAX_PREVIOUS_TOKENS, MAX_DECODER_TOKENS - len(labels))
    if room <= 0:
        return {"labels": labels}
    previous = tokenizer(" " + row.previous_text, add_special_tokens=False).input_ids[-room:]
    sequence = [tokenizer.convert_tokens_to_ids("<|startofprev|>"), *previous, *labels]
    # The decoder reads sequence[:-1] and predicts sequence[1:]; predicting the context and
    # the <|startoftranscript|> after it is not the task: no loss there.
    targets = sequence[1:]
    masked = len(previous) + 1
    return {
        "decoder_input_ids": sequence[:-1],
        "labels": [-100] * masked + targets[masked:],
    }
