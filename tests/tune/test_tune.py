"""`fitwhisper tune` (Optuna) on tiny random Whisper models: the search space and its
overrides, a trial the planner says will not fit, a killed tune that continues its study,
two processes sharing one study, and which trial best_config.yaml holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.conftest import write_tone

from fitwhisper.config import ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError
from fitwhisper.tune.space import Choice, Range, apply_overrides, default_space, parse_spec
from fitwhisper.tune.trials import options_for

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


def test_the_default_space_follows_the_method_and_the_overrides_change_it() -> None:
    full = default_space("full", by_epochs=True)
    lora = default_space("4bit", by_epochs=False)
    assert full["learning_rate"] == Range(3e-6, 1e-4, log=True)
    assert lora["learning_rate"].high > full["learning_rate"].high and "lora_r" in lora
    assert "num_train_epochs" in full and "num_train_epochs" not in lora
    space, fixed = apply_overrides(
        full, ["learning_rate=1e-5..1e-3:log", "weight_decay=off", "seed=7", "lora_r=8|16"]
    )
    assert space["learning_rate"] == Range(1e-5, 1e-3, log=True)
    assert "weight_decay" not in space and fixed == {"seed": 7}
    assert space["lora_r"] == Choice((8, 16))
    # Augmentation's strength is searchable when named, and a trial gets it as an option.
    space, _ = apply_overrides(full, ["augment=none|medium"])
    assert space["augment"] == Choice(("none", "medium")) and "augment" not in full
    _, trial_cfg = options_for(ModelConfig(), TrainConfig(), {"augment": "medium"}, set())
    assert trial_cfg.augment == "medium"
    assert parse_spec("1..4") == Range(1, 4, integer=True)


def test_unreadable_specs_are_listed_together() -> None:
    with pytest.raises(ConfigError) as e:
        apply_overrides(
            {}, ["nope=1", "learning_rate=1e-3..1e-5", "weight_decay", "lora_r=0..8:log"]
        )
    message = e.value.message
    assert "nope is not searchable" in message
    assert "1e-3..1e-5 is not a range from low to high" in message
    assert "write NAME=SPEC" in message and "log scale needs a positive low end" in message


@pytest.fixture(scope="module")
def manifests(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("tune-data")
    rows = []
    for i in range(6):
        wav = write_tone(root / f"{i}.wav", 1.0 + 0.1 * i, freq=300 + 40 * i)
        rows.append({"audio": str(wav), "text": ["yes", "no", "up", "down", "left", "right"][i]})
    train, held_out = root / "train.jsonl", root / "eval.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    held_out.write_text("".join(json.dumps(r) + "\n" for r in rows[4:]))
    return train, held_out


def _args(model: Path, manifests, out: Path, *extra: str) -> list[str]:
    train, held_out = manifests
    flags = {
        "--model": model,
        "--train_manifest": train,
        "--eval_manifest": held_out,
        "--output_dir": out,
        "--max_steps": 4,
        "--per_device_train_batch_size": 2,
        "--generation_max_length": 4,
        "--logging_steps": 1,
        "--report_to": "none",
        "--heartbeat_s": 1,
    }
    if held_out is None:  # --folds judges the trials
        del flags["--eval_manifest"]
    return ["tune", *(str(x) for pair in flags.items() for x in pair), "-q", *extra]


def _study(out: Path):
    import optuna

    return optuna.load_study(study_name=out.name, storage=f"sqlite:///{out / 'study.db'}")


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{SRC}:{HERE.parents[1]}", "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


def test_a_trial_that_would_not_fit_is_pruned_before_any_model_loads(
    tiny_whisper_dir, manifests, tmp_path, monkeypatch
) -> None:
    import fitwhisper.models.resolve as resolve
    from fitwhisper.cli import main

    def no_load(*args, **kwargs):
        raise AssertionError("a model loaded for a trial that does not fit")

    monkeypatch.setattr(resolve, "load_model", no_load)
    out = tmp_path / "study"
    code = main(
        [*_args(tiny_whisper_dir, manifests, out, "--n_trials", "2"), "--gpu_memory", "1MB"]
    )
    assert code == 1  # no trial finished
    trials = _study(out).get_trials()
    assert [t.state.name for t in trials] == ["PRUNED", "PRUNED"]
    assert not (out / "trials").exists() or not any((out / "trials").rglob("model.safetensors"))


def test_a_killed_tune_continues_its_study_without_losing_or_repeating_a_trial(
    tiny_whisper_dir, manifests, tmp_path
) -> None:
    out = tmp_path / "study"
    args = _args(
        tiny_whisper_dir,
        manifests,
        out,
        "--n_trials",
        "3",
        "--search",
        "warmup_ratio=off",
        "--search",
        "weight_decay=off",
    )
    killed = _run([sys.executable, str(HERE / "kill_in_trial.py"), "1", "2", *args])
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert (out / "trials" / "trial-001" / "checkpoint-2").is_dir()
    # The rerun needs no kill: it runs in this process.
    from fitwhisper.cli import main

    assert main(args) == 0
    trials = {t.number: t for t in _study(out).get_trials()}
    assert trials[1].state.name == "FAIL"
    counted = [t for t in trials.values() if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(counted) == 3
    retry = [t for t in counted if t.system_attrs.get("failed_trial") == 1]
    assert len(retry) == 1 and retry[0].params == trials[1].params
    assert retry[0].user_attrs["run_dir"].endswith("trial-001")
    record = (out / "trials" / "trial-001" / "fitwhisper.yaml").read_text()
    assert "checkpoint-2" in record.split("resumed_from:")[1].splitlines()[0]
    lrs = [t.params["learning_rate"] for t in counted]
    assert len(set(lrs)) == 3  # nothing drawn twice
    assert (out / "trials.md").is_file() and (out / "best_config.yaml").is_file()
    assert "<html" in (out / "report.html").read_text()[:500].lower()


def test_two_tune_processes_share_one_study(tiny_whisper_dir, manifests, tmp_path) -> None:
    out = tmp_path / "study"
    args = _args(tiny_whisper_dir, manifests, out, "--n_trials", "4")
    cmd = [sys.executable, "-m", "fitwhisper", *args]
    env = {**os.environ, "PYTHONPATH": f"{SRC}:{HERE.parents[1]}", "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for _ in range(2)
    ]
    logs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs[0][-2000:] + logs[1][-2000:]
    # Exactly --n_trials ran between them (a trial asked for after the last was claimed is
    # surplus: failed, not run, not listed).
    trials = [t for t in _study(out).get_trials() if not t.user_attrs.get("surplus")]
    assert sum(t.state.name in ("COMPLETE", "PRUNED") for t in trials) == 4
    folders = [t.user_attrs["run_dir"] for t in trials]
    assert len(set(folders)) == len(folders)
    here = [int(log.split("trial(s) run by this process")[0].rsplit("(", 1)[1]) for log in logs]
    assert all(n >= 1 for n in here), logs
    assert sum(here) == sum(t.state.name != "WAITING" for t in trials) == 4


def test_a_trial_asked_for_after_the_last_was_claimed_is_not_run() -> None:
    """Other processes hold --n_trials trials (running or done) numbered before this one."""
    import optuna

    from fitwhisper.tune.trials import Objective, SurplusTrial

    study = optuna.create_study()
    done = study.ask()
    study.tell(done, 0.5)
    study.ask()  # running in another process
    study.ask()  # another
    objective = Objective(None, None, None, {}, {}, Path("."), set(), None, n_trials=3)
    study.optimize(objective, n_trials=5, catch=(SurplusTrial,))
    late = study.get_trials()[3:]
    assert [(t.state.name, t.user_attrs) for t in late] == [("FAIL", {"surplus": True})]
    assert objective.calls == 0


def test_the_users_own_options_run_again_after_their_trial_failed(
    tiny_whisper_dir, manifests, tmp_path
) -> None:
    """Trial 0 is the user's options, the table's baseline; a bad row ends it (and the
    tune) with the data check's message; once fixed, the baseline runs before any draw."""
    from fitwhisper.cli import main

    train, held_out = manifests
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"audio": "missing.wav", "text": "yes"}\n')
    out = tmp_path / "study"
    assert main(_args(tiny_whisper_dir, (bad, held_out), out, "--n_trials", "1")) == 1
    assert main(_args(tiny_whisper_dir, manifests, out, "--n_trials", "1")) == 0
    trials = _study(out).get_trials()
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert trials[1].user_attrs.get("baseline") and trials[1].params == trials[0].params


def test_the_first_trial_runs_the_users_own_value_outside_the_searched_range(
    tiny_whisper_dir, manifests, tmp_path
) -> None:
    """The baseline is the user's options even where the space leaves them out (before:
    a learning rate below the range was drawn from it, so the table compared two draws)."""
    from fitwhisper.cli import main

    out = tmp_path / "study"
    args = _args(tiny_whisper_dir, manifests, out, "--n_trials", "1")
    assert main([*args, "--search", "learning_rate=1e-4..1e-3:log"]) == 0
    (trial,) = _study(out).get_trials()
    assert trial.user_attrs["baseline"] and "learning_rate" not in trial.params
    record = yaml.safe_load((Path(trial.user_attrs["run_dir"]) / "fitwhisper.yaml").read_text())
    assert record["train"]["learning_rate"] == 1e-5
    assert "| 1e-05 |" in (out / "trials.md").read_text()


def _finished_study(tmp_path: Path, errors: dict[int, list[int]], *, missing: int | None = None):
    """An in-memory study of finished trials, trial 0 the user's options, each with a run
    folder whose predictions.jsonl holds `errors[n]` (10 units per clip)."""
    import optuna

    study = optuna.create_study()
    dist = {"learning_rate": optuna.distributions.FloatDistribution(1e-6, 1e-2, log=True)}
    for n, errs in errors.items():
        run = tmp_path / f"trial-{n}"
        (run / "eval").mkdir(parents=True)
        if n != missing:
            clips = [{"id": f"c{i}", "errors": e, "ref_units": 10} for i, e in enumerate(errs)]
            (run / "eval" / "predictions.jsonl").write_text(
                "".join(json.dumps(c) + "\n" for c in clips)
            )
        study.add_trial(
            optuna.trial.create_trial(
                params={"learning_rate": 1e-5 * (n + 1)},
                distributions=dist,
                value=sum(errs) / (10 * len(errs)),
                user_attrs={"run_dir": str(run), "baseline": n == 0},
            )
        )
    return study


def test_best_config_keeps_the_users_options_unless_a_trial_beats_them_beyond_chance(
    tmp_path: Path,
) -> None:
    from fitwhisper.tune.results import choose

    base = [3, 2, 4, 3, 2, 3, 4, 2, 3, 3] * 4  # 40 clips
    lucky = [e - (i == 0) for i, e in enumerate(base)]  # one clip better
    clear = [e - 1 for e in base]  # every clip better
    study = _finished_study(tmp_path / "a", {0: base, 1: lucky, 2: clear})
    pick = choose(study, "significant")
    assert (pick.trial.number, pick.lowest.number) == (2, 2)
    assert "beyond chance" in pick.reason and "40 held-out clips" in pick.reason

    study = _finished_study(tmp_path / "b", {0: base, 1: lucky})
    pick = choose(study, "significant")
    assert (pick.trial.number, pick.lowest.number) == (0, 1)
    assert "kept" in pick.reason and "--choose lowest takes trial 1" in pick.reason
    assert choose(study, "lowest").trial.number == 1

    # The user's options lowest: nothing to test; a trial's clips out of reach: the lowest.
    assert (
        choose(_finished_study(tmp_path / "c", {0: lucky, 1: base}), "significant").trial.number
        == 0
    )
    study = _finished_study(tmp_path / "d", {0: base, 1: lucky}, missing=0)
    pick = choose(study, "significant")
    assert pick.trial.number == 1 and "not on this machine" in pick.reason


def test_the_first_trials_epochs_are_counted_from_the_training_rows(manifests) -> None:
    """tune applies train's epochs rule (recipes.with_epochs_for_data) to its first trial,
    counting the manifest's rows as --max_train_samples keeps them."""
    from fitwhisper.config import DataConfig
    from fitwhisper.recipes import with_epochs_for_data
    from fitwhisper.tune.run import _training_rows

    train_cfg = TrainConfig(train_manifest=str(manifests[0]), per_device_train_batch_size=2)
    assert _training_rows(DataConfig(), train_cfg) == 4
    assert _training_rows(DataConfig(max_train_samples=3), train_cfg) == 3
    # 4 rows at batch 2: 2 steps an epoch, so the most epochs the rule gives.
    assert with_epochs_for_data(train_cfg, 4, 1, set())[0].num_train_epochs == 12


@pytest.fixture(scope="module")
def speakers_manifest(tmp_path_factory) -> Path:
    """8 clips by 4 speakers (2 each), audio paths relative to the manifest."""
    root = tmp_path_factory.mktemp("tune-speakers")
    words = ["yes", "no", "up", "down", "left", "right", "on", "off"]
    rows = []
    for i, word in enumerate(words):
        write_tone(root / f"{i}.wav", 1.0 + 0.1 * i, freq=300 + 40 * i)
        rows.append({"audio": f"{i}.wav", "text": word, "speaker": f"s{i // 2}"})
    path = root / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_folds_deal_whole_speakers_and_keep_every_clip(speakers_manifest, tmp_path, caplog) -> None:
    from fitwhisper.config import DataConfig
    from fitwhisper.errors import DataError
    from fitwhisper.tune.folds import write_folds

    folds = write_folds(str(speakers_manifest), DataConfig(), 2, "speaker", 0, tmp_path)
    held = [[json.loads(x) for x in f.held_out.read_text().splitlines()] for f in folds]
    trained = [[json.loads(x) for x in f.train.read_text().splitlines()] for f in folds]
    assert [len(h) for h in held] == [4, 4]
    assert sorted(r["text"] for h in held for r in h) == sorted(
        json.loads(x)["text"] for x in speakers_manifest.read_text().splitlines()
    )
    for h, t in zip(held, trained, strict=True):
        assert not {r["speaker"] for r in h} & {r["speaker"] for r in t}
        assert len(h) + len(t) == 8
        assert all(Path(r["audio"]).is_file() for r in h + t)  # made absolute
    again = write_folds(str(speakers_manifest), DataConfig(), 2, "speaker", 0, tmp_path)
    assert again == folds
    with pytest.raises(DataError, match="too few for --folds 5"):
        write_folds(str(speakers_manifest), DataConfig(), 5, "speaker", 0, tmp_path)
    with pytest.raises(DataError, match="8 rows .* have no 'spk'"):
        write_folds(str(speakers_manifest), DataConfig(), 2, "spk", 0, tmp_path)
    # A row naming no audio is in no fold, and counted (the data check names it).
    extra = speakers_manifest.with_name("extra.jsonl")
    extra.write_text(speakers_manifest.read_text() + '{"text": "stop", "speaker": "s9"}\n')
    with caplog.at_level("WARNING", logger="fitwhisper.tune.folds"):
        folds = write_folds(str(extra), DataConfig(), 2, "speaker", 0, tmp_path / "x")
    assert sum(f.clips for f in folds) == 8
    assert "1 rows of" in caplog.text and "in no fold" in caplog.text


def test_folds_judge_each_trial_on_every_clip_and_a_killed_trial_resumes_in_its_fold(
    tiny_whisper_dir, speakers_manifest, tmp_path, capsys
) -> None:
    """--folds 2: each trial trains twice, each run scoring the speakers it left out, and its
    error is over all 8 clips. Killed after fold 1's first checkpoint, the rerun trains
    neither fold 0 (scored) again nor fold 1 from the start; best_config.yaml trains on the
    whole manifest."""
    from fitwhisper.cli import main

    out = tmp_path / "study"
    args = _args(tiny_whisper_dir, (speakers_manifest, None), out, "--n_trials", "1")
    args += ["--folds", "2", "--num_train_epochs", "2", "--max_steps", "-1"]
    killed = _run([sys.executable, str(HERE / "kill_in_fold.py"), "1", *args])
    assert killed.returncode == -9, killed.stderr[-3000:]
    trial = out / "trials" / "trial-000"
    scored_before = (trial / "fold-0" / "eval" / "predictions.jsonl").stat().st_mtime_ns
    assert list((trial / "fold-1").glob("checkpoint-*"))

    assert main(args) == 0
    assert (trial / "fold-0" / "eval" / "predictions.jsonl").stat().st_mtime_ns == scored_before
    record = yaml.safe_load((trial / "fold-1" / "fitwhisper.yaml").read_text())
    assert "checkpoint-" in str(record["resolved"]["resumed_from"])
    (done,) = [t for t in _study(out).get_trials() if t.state.name == "COMPLETE"]
    assert Path(done.user_attrs["run_dir"]) == trial
    pooled = [json.loads(x) for x in (trial / "eval/predictions.jsonl").read_text().splitlines()]
    assert len(pooled) == 8
    errors = sum(r["errors"] for r in pooled) / sum(r["ref_units"] for r in pooled)
    assert done.value == pytest.approx(errors)
    assert sorted(done.intermediate_values) == [0, 1]  # the pooled error after each fold
    for k in (0, 1):
        assert not (trial / f"fold-{k}" / "final").exists()  # a means, not a result
    best = yaml.safe_load((out / "best_config.yaml").read_text())
    assert best["train"]["train_manifest"] == str(speakers_manifest)
    assert best["train"]["eval_manifest"] is None
    # The study's trials were judged by 2 folds: a rerun asking for 3 is refused before it
    # deals new folds under them.
    dealt = (out / "folds" / "fold-0-train.jsonl").read_text()
    assert main([*args[: args.index("--folds")], "--folds", "3", "--n_trials", "2"]) == 1
    assert "judged its 1 trial(s) by 2-fold cross-validation" in capsys.readouterr().err
    assert (out / "folds" / "fold-0-train.jsonl").read_text() == dealt
    assert not (out / "folds" / "fold-2-train.jsonl").exists()
    # Both ways of judging at once is refused before any trial.
    both = _args(tiny_whisper_dir, (speakers_manifest, speakers_manifest), tmp_path / "x")
    assert main([*both, "--folds", "2"]) == 1
    assert not (tmp_path / "x" / "trials").exists()


def test_every_search_form_with_bad_values_is_refused_before_any_model_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A value, a range and a choice, each checked as the option itself checks it (type,
    choices, range), all problems of the command line in one paragraph, exit 1."""
    import fitwhisper.models.resolve as resolve
    from fitwhisper.cli import main

    def loaded(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(resolve, "resolve_model", loaded)
    monkeypatch.setattr(resolve, "load_model", loaded)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"audio": "a.wav", "text": "x"}\n')
    bad = {
        "learning_rate=abc": "learning_rate takes a number, got 'abc'",
        "lr_scheduler_type=bogus": "lr_scheduler_type takes one of linear, cosine",
        "max_steps=-3": "--max_steps must be at least 1, or -1 to train by epochs, got -3",
        "lora_r=8|": "lora_r takes a whole number, got ''",
        "lora_r=8.5..16": "lora_r takes a whole number, got 8.5",
        "augment=1..3": "augment takes one of none, light, medium, strong, not a range",
        "freeze_encoder=maybe": "freeze_encoder takes true or false, got 'maybe'",
        "seed=-1|3": "--seed must be in [0, 4294967295]",
        "full_window_share=0..2": "--full_window_share must be in [0, 1], got 2",
    }
    argv = ["tune", "--model", "offline/tiny.en", "--train_manifest", str(manifest),
            "--eval_manifest", str(manifest), "--output_dir", str(tmp_path / "study"),
            "--per_device_train_batch_size", "0"]  # fmt: skip
    for spec in bad:
        argv += ["--search", spec]
    assert main(argv) == 1
    err = capsys.readouterr().err
    message, _, hint = err.partition("\n\nhint: ")
    assert "Traceback" not in err and "\n" not in message.strip() and hint
    assert "--per_device_train_batch_size must be at least 1, got 0" in message
    for spec, why in bad.items():
        assert f"--search {spec}: {why}" in message, spec
    assert not (tmp_path / "study").exists()
