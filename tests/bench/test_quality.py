"""bench/quality.py: its split never puts a speaker on both sides, and `--quick` prints one
table row per recipe. No quality figure is asserted: a step or two trains nothing."""

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "quality.py"
_spec = importlib.util.spec_from_file_location("quality", _PATH)
quality = importlib.util.module_from_spec(_spec)
sys.modules["quality"] = quality  # dataclasses look their module up
_spec.loader.exec_module(quality)


def _rows(speakers: dict[str, tuple[str, int]]) -> list[dict]:
    """`clips` rows for each speaker, each carrying its kind in `kind`."""
    return [
        {"speaker": s, "kind": kind, "audio": f"{s}-{i}.flac", "text": "x"}
        for s, (kind, clips) in speakers.items()
        for i in range(clips)
    ]


def test_split_is_speaker_disjoint_seeded_and_stratified():
    rows = _rows(
        {f"a{i}": ("adult", 3) for i in range(12)} | {f"c{i}": ("child", 2) for i in range(6)}
    )
    kind = lambda r: r["kind"]  # noqa: E731
    s = quality.speaker_split(rows, 9, 6, seed=1, stratum=kind)
    assert not set(s.train_speakers) & set(s.eval_speakers)
    assert {r["speaker"] for r in s.train} == set(s.train_speakers)
    assert {r["speaker"] for r in s.eval} == set(s.eval_speakers)
    assert (len(s.train_speakers), len(s.eval_speakers)) == (9, 6)
    # Each kind in its share of the 18 speakers (2:1) on both sides.
    assert sorted(s.strata[x] for x in s.eval_speakers).count("child") == 2
    assert sorted(s.strata[x] for x in s.train_speakers).count("child") == 3
    assert len(s.train) == 6 * 3 + 3 * 2  # every clip of a chosen speaker
    again = quality.speaker_split(rows, 9, 6, seed=1, stratum=kind)
    assert (again.train_speakers, again.eval_speakers) == (s.train_speakers, s.eval_speakers)
    other = quality.speaker_split(rows, 9, 6, seed=2, stratum=kind)
    assert other.eval_speakers != s.eval_speakers
    # The held-out speakers do not move when fewer speakers train.
    fewer = quality.speaker_split(rows, 3, 6, seed=1, stratum=kind)
    assert fewer.eval_speakers == s.eval_speakers
    capped = quality.speaker_split(rows, 9, 6, seed=1, stratum=kind, clips_per_speaker=1)
    assert len(capped.train) == 9 and len(capped.eval) == 6


def test_split_refuses_more_speakers_than_the_set_has():
    rows = _rows({f"s{i}": ("", 1) for i in range(5)})
    with pytest.raises(quality.SplitError, match="at most 5"):
        quality.speaker_split(rows, 4, 2, seed=0)
    with pytest.raises(quality.SplitError, match="at least 1"):
        quality.speaker_split(rows, 0, 2, seed=0)


@pytest.mark.parametrize("key", ["en", "zh"])
def test_shared_sets_split_by_speaker(shared_data, monkeypatch, key):
    monkeypatch.setattr(quality, "SHARED", shared_data)
    ds = quality.SETS[key]
    rows = quality.load_rows(ds)
    s = quality.speaker_split(rows, 40, 20, seed=42, stratum=ds.stratum)
    assert not {r["speaker"] for r in s.train} & {r["speaker"] for r in s.eval}
    assert not {r["audio"] for r in s.train} & {r["audio"] for r in s.eval}
    # Both kinds of speaker on both sides (children/adults, Common Voice/AISHELL-3).
    for side in (s.train_speakers, s.eval_speakers):
        assert len({s.strata[x] for x in side}) == 2


def test_mandarin_table_has_cer_and_traditional_share():
    rows = _rows({f"cv{i}": ("commonvoice-zh-CN", 2) for i in range(4)})
    rows += _rows({f"a3-{i}": ("aishell3", 1) for i in range(4)})
    split = quality.speaker_split(rows, 4, 4, seed=0, stratum=lambda r: r["kind"])
    ids = [str(Path(r["audio"]).resolve()) for r in split.eval]

    def outcome(key, errors, share, seconds=None):
        return quality.Outcome(
            key,
            "m",
            errors,
            [10] * len(ids),
            ids,
            sum(errors) / (10 * len(ids)),
            script_share=share,
            loop_s=seconds,
            run_s=seconds,
        )

    outcomes = [
        outcome("zero-shot", [4] * len(ids), 0.8),
        outcome("defaults", [2] * len(ids), 1.0, 30.0),
        outcome("standard", [3] * len(ids), 0.99, 60.0),
        outcome("lora", [3, 2] * (len(ids) // 2), 1.0, 50.0),
    ]
    args = argparse.Namespace(seed=0, quick=False, epochs=3)
    text = quality.format_section(quality.SETS["zh"], split, outcomes, args)
    table = [line for line in text.splitlines() if line.startswith("|")]
    head = [c.strip() for c in table[0].strip("|").split("|")]
    assert head[3] == "CER %" and head[-2:] == ["Traditional %", "training s (loop / whole run)"]
    assert not any("children" in h for h in head)
    body = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]
    assert [r[3] for r in body] == ["40.0", "20.0", "30.0", "25.0"]
    assert [r[-2] for r in body] == ["80.0", "100.0", "99.0", "100.0"]
    assert body[1][4].startswith("-10.0") and body[1][5].startswith("-20.0")
    assert body[3][4].startswith("-5.0 (")  # paired by clip: the interval is printed


def test_another_model_on_a_set_is_prompted_in_its_language_and_scored_by_its_metric():
    """`--model`: a multilingual model on the English set is prompted in English and still
    scored by WER; an English-only one cannot take the Mandarin set."""
    en = quality.with_model(quality.SETS["en"], "offline/base")
    assert (en.model, en.language, en.metric) == ("offline/base", "en", "WER")
    assert quality.with_model(quality.SETS["en"], None) is quality.SETS["en"]
    with pytest.raises(quality.SetError, match="English-only"):
        quality.with_model(quality.SETS["zh"], "offline/tiny.en")


@pytest.mark.slow
def test_quick_run_prints_one_row_per_recipe(shared_data, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(quality, "SHARED", shared_data)
    out, work = tmp_path / "table.md", tmp_path / "work"
    assert quality.main(["--set", "en", "--quick", "--out", str(out), "--work", str(work)]) == 0
    text = out.read_text()
    assert text in capsys.readouterr().out
    table = [line for line in text.splitlines() if line.startswith("|")]
    head = [c.strip() for c in table[0].strip("|").split("|")]
    assert head[:6] == [
        "recipe",
        "training clips (speakers)",
        "held-out clips (speakers)",
        "WER %",
        "vs standard recipe, points (95% CI)",
        "vs zero-shot, points (95% CI)",
    ]
    assert head[6:] == ["adults WER %", "children WER %", "training s (loop / whole run)"]
    body = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]
    assert [r[0] for r in body] == [quality.RECIPES[k] for k in quality.DEFAULT_RECIPES]
    assert [r[1] for r in body] == ["0", "2 (2)", "2 (2)", "2 (2)"]
    assert {r[2] for r in body} == {"2 (2)"}
    for r in body:
        float(r[3])  # an error rate was measured
    zero, defaults, standard, lora = body
    assert standard[4] == "" and zero[5] == "" and zero[-1] == ""
    for row in (defaults, lora):
        assert " to " in row[4] and " to " in row[5]  # a difference and its interval
    # What trained and what was scored hold no speaker in common.
    speakers = {
        str(Path(r["audio"]).resolve()): r["speaker"] for r in quality.load_rows(quality.SETS["en"])
    }

    def speakers_of(name):
        lines = (work / "en" / name).read_text().splitlines()
        return {speakers[json.loads(x)["audio"]] for x in lines}

    assert len(speakers_of("train.jsonl")) == len(speakers_of("eval.jsonl")) == 2
    assert not speakers_of("train.jsonl") & speakers_of("eval.jsonl")
    # The training manifest names each clip's speaker (what `--speaker_context` reads).
    for line in (work / "en" / "train.jsonl").read_text().splitlines():
        row = json.loads(line)
        assert row["speaker"] == speakers[row["audio"]]

    # Run again on the same work folder: the finished rows are read back, not trained again,
    # and a row measured under other conditions (here earlier defaults of `train`) runs again.
    capsys.readouterr()
    again = tmp_path / "again.md"
    # A decoding row scores the kept defaults row's model by beam search, training nothing.
    argv = ["--set", "en", "--quick", "--recipes", "zero-shot,defaults,defaults-beam5"]
    assert quality.main([*argv, "--out", str(again), "--work", str(work)]) == 0
    printed = capsys.readouterr().out
    assert "[en] zero-shot: " in printed and "[en] defaults: " in printed
    assert printed.count("(kept from ") == 2 and "[en] defaults-beam5 ..." in printed
    beam = json.loads((work / "en" / "defaults-beam5" / "outcome.json").read_text())
    assert beam["outcome"]["model"] == str(work / "en" / "defaults" / "final")
    plan = json.loads((work / "en" / "defaults-beam5" / "eval" / "eval_plan.json").read_text())
    assert plan["generation"].startswith("beam search of 5")
    with pytest.raises(SystemExit):  # the row it decodes must come first
        quality.main(["--set", "en", "--quick", "--recipes", "defaults-beam5,defaults"])
    rows_again = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in again.read_text().splitlines()
        if line.startswith("|")
    ]
    # The same figures and pair with zero-shot (no standard row this time to compare with).
    assert [r[:4] + r[5:] for r in rows_again[2:4]] == [r[:4] + r[5:] for r in body[:2]]
    from fitwhisper.config import TrainConfig

    saved = json.loads((work / "en" / "defaults" / "outcome.json").read_text())
    assert saved["conditions"]["epochs"] is None  # train's own (fitwhisper/recipes.py)
    standard = json.loads((work / "en" / "standard" / "outcome.json").read_text())
    assert standard["conditions"]["epochs"] == 3  # as the recipe ships
    recorded = saved["conditions"]["defaults"]["TrainConfig"]
    assert recorded["full_window_share"] == TrainConfig.full_window_share
    recorded["full_window_share"] = TrainConfig.full_window_share / 2
    (work / "en" / "defaults" / "outcome.json").write_text(json.dumps(saved))
    assert quality.main([*argv, "--work", str(work)]) == 0
    assert capsys.readouterr().out.count("(kept from ") == 1  # zero-shot only: the defaults
    # ran again, so its beam-search row did too


def test_long_form_errors_are_charged_to_the_clips_they_touch(tmp_path: Path):
    """bench/long_form_quality.py: a recording's edits land on its clips (an insertion
    between clips on the earlier one), so long-form and single-clip errors pair by clip; the
    recordings hold every held-out clip at its known time."""
    import numpy as np
    import soundfile as sf

    lf = sys.modules["long_form_quality"]  # bench/quality.py imports it
    refs = [["a", "b"], ["c", "d"], ["e"]]
    errors, deletions = lf.charge_to_clips(refs, ["a", "x", "c", "d", "z", "e"])
    assert (errors, deletions) == ([1, 1, 0], [0, 0, 0])
    errors, deletions = lf.charge_to_clips(refs, ["a", "b"])
    assert (errors, deletions) == ([0, 2, 1], [0, 2, 1])
    assert lf.charge_to_clips(refs, []) == ([2, 2, 1], [2, 2, 1])
    rows = []
    for i in range(5):
        path = tmp_path / f"{i}.wav"
        # 1-5 s of "speech" with 0.3 s of silence before it and 0.2 s after, as recorded
        speech = np.full(16000 * (i + 1), 0.1, np.float32)
        sf.write(path, np.concatenate([np.zeros(4800), speech, np.zeros(3200)]), 16000)
        rows.append({"audio": str(path), "text": f"clip {i}"})
    (rec,) = lf.build_recordings(rows, tmp_path / "out", seed=0)  # 17.5 s: one recording
    assert rec.texts == [f"clip {i}" for i in range(5)]
    # A clip's reference times are its speech, not its file's silent edges.
    assert [e - s for s, e in rec.times] == pytest.approx([1.0, 2.0, 3.0, 4.0, 5.0], abs=2e-3)
    audio, _ = sf.read(rec.audio, dtype="float32")
    for start, end in rec.times:
        inside = audio[round(start * 16000) + 16 : round(end * 16000) - 16]
        assert np.all(inside > 0.09)
        assert audio[round(start * 16000) - 16] == 0 and audio[round(end * 16000) + 16] == 0
    assert all(
        b[0] - a[1] >= lf.PAUSE_S[0] + 0.5 - 1e-3
        for a, b in zip(rec.times, rec.times[1:], strict=False)
    )
    assert "clip" in lf.domain_prompt(rec.texts)
