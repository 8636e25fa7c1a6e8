"""Quality: what each fine-tuning recipe gives on speakers the training never heard.

    PYTHONPATH=src python bench/quality.py --set en --out table.md
    PYTHONPATH=src python bench/quality.py --set zh --out table.md
    PYTHONPATH=src python bench/quality.py --set en --quick   # smoke test: 1 step a recipe

Sets (../shared/data, split by speaker, never by clip):
- en: `offline/tiny.en` on speechocean762 (`speechocean-train`: Mandarin-accented read
  English, 79 speakers, 22 of them children aged 10-15), WER with Whisper's English
  normaliser, also for children and adults apart;
- zh: `offline/base` on `cv-zh-train` (61 Mandarin speakers: 31 from Common Voice with 20
  clips each, 30 from AISHELL-3 with one), references in Traditional characters
  (`text_zh_tw`), CER, and the share of the output's Han characters that are Traditional.

The split is seeded and stratified (children and adults on en, the two corpora on zh) so
both sides hold each kind of speaker in the set's proportion; the held-out speakers depend
on the seed and --eval_speakers only, not on how many train.

Recipes, each trained on the same clips with the same seed and batch of 8 clips, and the
epochs --epochs gives or, without it, its own (the standard recipe and Whisper-Finetune
ship 3; fitwhisper's rows take train's: 3, or more on a small set, fitwhisper/recipes.py):
- zero-shot: the model untrained;
- fitwhisper's defaults: `fitwhisper train` given the model, the data, the output folder
  and the seed, nothing else;
- the standard recipe: bench/baseline_recipe.py (the Hugging Face blog's: full
  fine-tuning, lr 1e-5, no warm-up, every clip padded to 30 s, no augmentation);
- LoRA as Whisper-Finetune (github.com/yeyupiaoling/Whisper-Finetune, the most-used
  community fine-tuner) ships it: adapters on q_proj, k_proj, v_proj, out_proj, fc1 and
  fc2, r 32, alpha 64, dropout 0.05, lr 1e-3 with warm-up (10% of the steps here; it ships
  50 steps), 30 s input, no augmentation; through fitwhisper's own LoRA path;
- zero-shot-beam5, defaults-beam5: that row's model again, scored by beam search of 5
  (nothing trains).

`--recipes` also measures fitwhisper's LoRA defaults (`--use_lora` alone: the method's
recipe, lr 1e-3, fitwhisper/recipes.py) and the same at full fine-tuning's lr 1e-5:
    PYTHONPATH=src python bench/quality.py --set en --recipes zero-shot,lora-1e-5,lora-defaults

`tuned` runs `fitwhisper tune` as a user would, on the training speakers alone
(--tune_val_speakers of them held out to judge its --tune_trials trials, or with
--tune_folds N every one of them by cross-validation), then trains its
best_config.yaml on every training speaker; the table's held-out speakers stay unseen:
    PYTHONPATH=src python bench/quality.py --set en --recipes zero-shot,defaults,tuned

A row finished in --work is kept there (`<set>/<recipe>/outcome.json`, with what it was
measured under) and read back by a later run on the same split, epochs, seed and options:
    PYTHONPATH=src python bench/quality.py --set zh --recipes zero-shot,standard --work W
    PYTHONPATH=src python bench/quality.py --set zh --recipes zero-shot,defaults,standard --work W

Another starting model (`--model`; a multilingual one on en is prompted in English), to
compare recipes by model size; give it its own --work:
    PYTHONPATH=src python bench/quality.py --set en --model offline/base --work W2

`--long_form` also joins the held-out clips into recordings of minutes and transcribes
them with every trained row's model as `fitwhisper transcribe` does, with and without a
prompt of domain words (bench/long_form_quality.py):
    PYTHONPATH=src python bench/quality.py --set en --recipes zero-shot,defaults,standard \
        --long_form --work W

Every model is scored the same way: greedy generation at 30 s input (as every engine feeds
the model) on the held-out clips; the -beam5 rows score a row's model by beam search of 5.
Differences are paired by clip, with the 95% interval of a paired bootstrap
(fitwhisper.report.stats.paired_bootstrap).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import baseline_recipe  # noqa: E402  (bench/ is not a package)
import long_form_quality  # noqa: E402
import train_speed  # noqa: E402

SHARED = train_speed.SHARED
BATCH = train_speed.CLIP_BATCH  # clips per optimizer step, in every recipe
STANDARD_LR = train_speed.LR  # the blog's 1e-5
CHILD_AGE = 16  # speechocean762's children are 10-15, its adults 19 and over


@dataclass(frozen=True)
class DataSet:
    """One of the shared sets, and how it is split and scored."""

    key: str
    title: str
    folder: str
    model: str
    language: str | None  # None: an English-only model
    metric: str  # WER or CER
    text_column: str
    stratum: Callable[[dict], str]  # the kind of speaker a row's speaker is
    generation_max_length: int  # about twice the set's longest transcript in tokens
    breakdown: bool = False  # error rate per stratum in the table


def _age_group(row: dict) -> str:
    return "children" if row["age"] < CHILD_AGE else "adults"


SETS = {
    "en": DataSet(
        key="en",
        title="speechocean762 (Mandarin-accented read English)",
        folder="speechocean-train",
        model="offline/tiny.en",
        language=None,
        metric="WER",
        text_column="text",
        stratum=_age_group,
        generation_max_length=64,
        breakdown=True,
    ),
    "zh": DataSet(
        key="zh",
        title="cv-zh-train (Mandarin, Traditional references)",
        folder="cv-zh-train",
        model="offline/base",
        language="zh",
        metric="CER",
        text_column="text_zh_tw",
        stratum=lambda r: r["corpus"],
        generation_max_length=128,
    ),
}


class SetError(ValueError):
    """The set cannot be measured with the model asked for."""


def with_model(ds: DataSet, model: str | None) -> DataSet:
    """The set with another starting model: a multilingual one on the English set is
    prompted in English (an English-only model takes no language token)."""
    if model is None:
        return ds
    from transformers import GenerationConfig

    from fitwhisper.models.resolve import resolve_model

    gen = GenerationConfig.from_pretrained(str(resolve_model(model).path_or_id))
    multilingual = bool(getattr(gen, "is_multilingual", False))
    if ds.language is not None and not multilingual:
        raise SetError(f"{model} is English-only; the {ds.key} set needs a multilingual model")
    language = ds.language or ("en" if multilingual else None)
    return replace(ds, model=model, language=language)


# --- the split ----------------------------------------------------------------------------


class SplitError(ValueError):
    """The sizes asked for do not fit the set."""


@dataclass
class Split:
    train: list[dict]
    eval: list[dict]
    train_speakers: list[str]
    eval_speakers: list[str]
    strata: dict[str, str] = field(default_factory=dict)  # speaker -> stratum


def load_rows(ds: DataSet) -> list[dict]:
    """The set's rows, `text` taken from its reference column, `audio` made absolute."""
    folder = SHARED / ds.folder
    manifest = folder / "manifest.jsonl"
    if not manifest.is_file():
        raise SplitError(
            f"{manifest} is missing: the shared recordings are read from ../shared/data "
            "beside the repository; set FW_SHARED_DATA to the folder that holds "
            f"{ds.folder}/ if they are elsewhere."
        )
    rows = [json.loads(x) for x in manifest.read_text().splitlines() if x.strip()]
    return [{**r, "text": r[ds.text_column], "audio": str(folder / r["audio"])} for r in rows]


def speaker_split(
    rows: list[dict],
    n_train: int,
    n_eval: int,
    seed: int,
    stratum: Callable[[dict], str] = lambda r: "",
    clips_per_speaker: int | None = None,
) -> Split:
    """Speaker-disjoint train and held-out rows: `n_eval` speakers held out and `n_train`
    others to train on, drawn with `seed` within each stratum in its share of the speakers.
    The held-out speakers follow from the seed and `n_eval` alone. A speaker's clips keep
    manifest order; `clips_per_speaker` keeps the first N of each.

    Raises:
        SplitError: fewer speakers than asked for, or a size below 1.
    """
    by_speaker: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_speaker[r["speaker"]].append(r)
    total = len(by_speaker)
    if n_train < 1 or n_eval < 1 or n_train + n_eval > total:
        raise SplitError(
            f"--train_speakers {n_train} and --eval_speakers {n_eval} do not fit this set's "
            f"{total} speakers: give each at least 1 and together at most {total}."
        )
    groups: dict[str, list[str]] = defaultdict(list)
    for speaker in sorted(by_speaker):
        groups[stratum(by_speaker[speaker][0])].append(speaker)
    names = sorted(groups)
    sizes = [len(groups[g]) for g in names]
    n_held = _apportion(n_eval, sizes, sizes)
    n_trained = _apportion(n_train, sizes, [s - h for s, h in zip(sizes, n_held, strict=True)])
    rng = random.Random(seed)
    train_spk, eval_spk = [], []
    for name, held, trained in zip(names, n_held, n_trained, strict=True):
        order = list(groups[name])
        rng.shuffle(order)
        eval_spk += order[:held]
        train_spk += order[held : held + trained]

    def clips(speakers: list[str]) -> list[dict]:
        return [r for s in speakers for r in by_speaker[s][:clips_per_speaker]]

    strata = {s: stratum(by_speaker[s][0]) for s in train_spk + eval_spk}
    return Split(clips(train_spk), clips(eval_spk), train_spk, eval_spk, strata)


def _apportion(n: int, sizes: list[int], caps: list[int]) -> list[int]:
    """`n` shared out in proportion to `sizes` (largest remainder), none above its cap."""
    exact = [n * s / sum(sizes) for s in sizes]
    got = [min(int(e), c) for e, c in zip(exact, caps, strict=True)]
    order = sorted(range(len(sizes)), key=lambda i: (int(exact[i]) - exact[i], i))
    while sum(got) < n:
        room = [i for i in order if got[i] < caps[i]]
        if not room:
            raise SplitError(f"cannot share {n} speakers out within {caps}")
        for i in room[: n - sum(got)]:
            got[i] += 1
    return got


# --- the recipes --------------------------------------------------------------------------


def as_flags(options: dict) -> list[str]:
    """{"lora_r": 32} -> ["--lora_r", "32"]."""
    return [x for k, v in options.items() for x in (f"--{k}", str(v))]


# LoRA as Whisper-Finetune's finetune.py configures it (use_adalora off).
LORA_OPTIONS = [
    "--use_lora",
    *as_flags(
        {
            "lora_target_modules": "q_proj,k_proj,v_proj,out_proj,fc1,fc2",
            "lora_r": 32,
            "lora_alpha": 64,
            "lora_dropout": 0.05,
            "learning_rate": 1e-3,
            "warmup_ratio": 0.1,
            "encoder_input": "full",
        }
    ),
]

STANDARD_NOTE = (
    f"lr {STANDARD_LR:g}, no warm-up, linear schedule, batch {BATCH}x1, features "
    "precomputed and padded to 30 s, no augmentation, fp32"
)

RECIPES = {
    "zero-shot": "zero-shot (the model untrained)",
    "defaults": "fitwhisper's defaults",
    "standard": "standard recipe: full, lr 1e-5, 30 s padding, no augmentation",
    "lora": "LoRA as Whisper-Finetune ships it: q,k,v,out,fc1,fc2 r 32, lr 1e-3, warm-up",
    "lora-defaults": "fitwhisper's LoRA defaults (`--use_lora`, nothing else: lr 1e-3)",
    "lora-1e-5": "fitwhisper's LoRA defaults with `--learning_rate 1e-5` (full's rate)",
    "lora-3e-4": "fitwhisper's LoRA defaults with `--learning_rate 3e-4`",
    "lora-3e-3": "fitwhisper's LoRA defaults with `--learning_rate 3e-3`",
    "full-3.75e-5": "fitwhisper's defaults with `--learning_rate 3.75e-5` (tiny's pretraining "
    "rate 1.5e-3 / 40)",
    "full-2.5e-5": "fitwhisper's defaults with `--learning_rate 2.5e-5` (base's pretraining "
    "rate 1e-3 / 40)",
    "augment-light": "fitwhisper's defaults with `--augment light`",
    "augment-medium": "fitwhisper's defaults with `--augment medium`",
    "augment-strong": "fitwhisper's defaults with `--augment strong`",
    "full-window": "fitwhisper's defaults with `--encoder_input full` (30 s windows, as the "
    "standard recipe)",
    "mixed-0.05": "fitwhisper's defaults with `--full_window_share 0.05` (the default until "
    "2026-11-29)",
    "epochs-3": "fitwhisper's defaults with `--num_train_epochs 3` (before the epochs rule)",
    "speaker-context": "fitwhisper's defaults with `--speaker_context` (each clip trained at "
    "--previous_text_share with its speaker's previous clip as context)",
    "epochs-6": "fitwhisper's defaults with `--num_train_epochs 6`",
    "epochs-12": "fitwhisper's defaults with `--num_train_epochs 12`",
    "augment-medium-epochs-6": "fitwhisper's defaults with `--augment medium --num_train_epochs 6`",
    "tuned": "`fitwhisper tune` on the training speakers, its best config trained on all",
    "zero-shot-beam5": "zero-shot, scored by beam search of 5",
    "defaults-beam5": "fitwhisper's defaults (the same model), scored by beam search of 5",
}
# Rows that train nothing: another decoding of the model a row above scored greedily
# (named before it in --recipes, run or kept in --work): (that row, beams).
DECODING_ROWS = {"zero-shot-beam5": ("zero-shot", 5), "defaults-beam5": ("defaults", 5)}


def model_row(key: str) -> str:
    """The row whose model `key` scores: itself, or the one a decoding row decodes again."""
    return DECODING_ROWS[key][0] if key in DECODING_ROWS else key


# The four rows a plain run measures; --recipes names others.
DEFAULT_RECIPES = ("zero-shot", "defaults", "standard", "lora")
# What `fitwhisper train` is given beyond the model, data, epochs and seed.
TRAIN_OPTIONS = {
    "defaults": [],
    "lora": LORA_OPTIONS,
    "lora-defaults": ["--use_lora"],
    "lora-1e-5": ["--use_lora", "--learning_rate", "1e-5"],
    "lora-3e-4": ["--use_lora", "--learning_rate", "3e-4"],
    "lora-3e-3": ["--use_lora", "--learning_rate", "3e-3"],
    "full-3.75e-5": ["--learning_rate", "3.75e-5"],
    "full-2.5e-5": ["--learning_rate", "2.5e-5"],
    "augment-light": ["--augment", "light"],
    "augment-medium": ["--augment", "medium"],
    "augment-strong": ["--augment", "strong"],
    "full-window": ["--encoder_input", "full"],
    "mixed-0.05": ["--full_window_share", "0.05"],
    "speaker-context": ["--speaker_context"],
    # Given after --epochs' own flag, so these rows train their epochs whatever --epochs says.
    "epochs-3": ["--num_train_epochs", "3"],
    "epochs-6": ["--num_train_epochs", "6"],
    "epochs-12": ["--num_train_epochs", "12"],
    "augment-medium-epochs-6": ["--augment", "medium", "--num_train_epochs", "6"],
}
# Pairs compared in the notes beside the table's two columns: (recipe, the row it is
# measured against).
PAIRS = (
    ("lora-defaults", "defaults"),
    ("lora-defaults", "lora-1e-5"),
    ("lora-3e-4", "lora-defaults"),
    ("lora-3e-3", "lora-defaults"),
    ("full-3.75e-5", "defaults"),
    ("full-2.5e-5", "defaults"),
    ("augment-light", "defaults"),
    ("augment-medium", "defaults"),
    ("augment-strong", "defaults"),
    ("full-window", "defaults"),
    ("mixed-0.05", "defaults"),
    ("defaults", "epochs-3"),
    ("speaker-context", "defaults"),
    ("epochs-6", "defaults"),
    ("epochs-12", "defaults"),
    ("epochs-12", "epochs-6"),
    ("augment-medium-epochs-6", "defaults"),
    ("augment-medium-epochs-6", "epochs-6"),
    ("tuned", "defaults"),
    ("zero-shot-beam5", "zero-shot"),
    ("defaults-beam5", "defaults"),
)
# The epochs of rows that ship their own, when --epochs is not given; fitwhisper's rows
# then train `train`'s own (fitwhisper/recipes.py: 3, or more on a small set).
SHIPPED_EPOCHS = {"standard": 3.0, "lora": 3.0}


def row_epochs(key: str, a: argparse.Namespace) -> float | None:
    """The epochs a row is given: --epochs, else what it ships; None: train's own."""
    return a.epochs if a.epochs is not None else SHIPPED_EPOCHS.get(key)


@dataclass
class Outcome:
    """One recipe's model scored on the held-out clips."""

    key: str
    model: str  # what was scored: a model spec or a saved folder
    errors: list[int]
    units: list[int]
    ids: list[str]
    rate: float
    script_share: float | None = None
    loop_s: float | None = None  # the training loop
    run_s: float | None = None  # the whole training call: data, model, loop, save
    note: str = ""


class _Timer:
    """A TrainerCallback's wall time from the first step to the last."""

    def __init__(self) -> None:
        from transformers import TrainerCallback

        outer = self

        class CB(TrainerCallback):
            def on_train_begin(self, args, state, control, **kw):
                outer.t0 = time.perf_counter()

            def on_train_end(self, args, state, control, **kw):
                outer.seconds = time.perf_counter() - outer.t0

        self.seconds = 0.0
        self.callback = CB()


def train_fitwhisper(
    ds: DataSet,
    train_m: Path,
    out: Path,
    epochs: float | None,
    seed: int,
    max_steps: int | None,
    options: list[str],
) -> tuple[str, float, float, str]:
    """`fitwhisper train` with `options`, as its command line runs it; the saved model, the
    loop's and the call's seconds, and the options that applied (from the run record).
    `epochs` None: the options' own (a `--config` that holds them)."""
    import yaml

    from fitwhisper.cli import build_parser
    from fitwhisper.cli.train import SECTIONS, options_from
    from fitwhisper.method import method_of
    from fitwhisper.train import train

    flags = {
        "model": ds.model,
        "train_manifest": train_m,
        "output_dir": out,
        **({"num_train_epochs": epochs} if epochs is not None else {}),
        "seed": seed,
        "report_to": "none",  # a logging option: no TensorBoard files for a benchmark
        **({"language": ds.language} if ds.language else {}),
        **({"max_steps": max_steps} if max_steps else {}),
    }
    argv = ["train", *as_flags(flags), "--overwrite_output_dir", *options]
    args = build_parser().parse_args(argv)
    configs, explicit = options_from(args, SECTIONS)
    timer = _Timer()
    t0 = time.perf_counter()
    result = train(*configs, callbacks=(timer.callback,), explicit=explicit)
    run_s = time.perf_counter() - t0
    record = yaml.safe_load((out / "fitwhisper.yaml").read_text())
    t = record["train"]
    if t["warmup_ratio"]:
        warm = f"warm-up {t['warmup_ratio']:g} of the steps"
    else:
        warm = f"warm-up {t['warmup_steps']} steps"
    window = t["encoder_input"]
    if window == "mixed":
        window += (
            f" ({t['full_window_share']:g} of batches at 30 s, "
            f"{t['packed_window_share']:g} of items packed windows)"
        )
    augmentation = record["resolved"]["augmentation"]
    m = record["model"]
    method = "full fine-tuning"
    if method_of(SimpleNamespace(**m)).adapters:
        method = (
            f"LoRA r {m['lora_r']}, alpha {m['lora_alpha']}, dropout {m['lora_dropout']:g} "
            f"on {','.join(m['lora_target_modules'])}"
        )
    applied = (
        f"{method}, lr {t['learning_rate']:g}, {t['num_train_epochs']:g} epochs, {warm}, "
        f"{t['lr_scheduler_type']} schedule, "
        f"batch {t['per_device_train_batch_size']}x{t['gradient_accumulation_steps']}, "
        f"weight decay {t['weight_decay']:g}, encoder input {window}, augmentation "
        f"{augmentation if isinstance(augmentation, str) else json.dumps(augmentation)}"
    )
    return str(result.final_dir), timer.seconds, run_s, applied


def tune_fitwhisper(
    ds: DataSet,
    split: Split,
    train_m: Path,
    out: Path,
    a: argparse.Namespace,
    conditions: dict,
) -> tuple[str, float, float, str]:
    """`fitwhisper tune` as a user would run it, on the training speakers alone:
    --tune_val_speakers of them are its held-out set (speaker-disjoint, drawn as the main
    split draws), the others its training set; then `train --config best_config.yaml` on
    every training speaker. The held-out speakers of the table are never seen by the search.
    Returns what train_fitwhisper returns, the note saying what the search chose."""
    from fitwhisper.cli import main as cli

    n_val = a.tune_val_speakers
    folder = out / "search"
    study = folder / "study"
    # A search stopped part-way continues (more --tune_trials too); one under other
    # conditions (split, defaults, judging) is not this row's: it starts again.
    searched = folder / "conditions.json"
    wanted = {k: v for k, v in conditions.items() if k != "trials"}
    if folder.exists() and (not searched.is_file() or json.loads(searched.read_text()) != wanted):
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    searched.write_text(json.dumps(wanted, indent=1))
    if a.tune_folds > 1:  # cross-validation over every training speaker
        search_train = folder / "train.jsonl"
        search_train.write_text(
            "".join(
                json.dumps({"audio": r["audio"], "text": r["text"], "speaker": r["speaker"]}) + "\n"
                for r in split.train
            )
        )
        judge = ["--folds", str(a.tune_folds)]
        judged = (
            f"each judged by {a.tune_folds}-fold cross-validation over the "
            f"{len(split.train_speakers)} training speakers"
        )
    else:
        inner = speaker_split(
            split.train, len(split.train_speakers) - n_val, n_val, a.seed, ds.stratum
        )
        search_train = train_speed._write(folder, "train", inner.train, folder)
        search_val = train_speed._write(folder, "validation", inner.eval, folder)
        judge = ["--eval_manifest", str(search_val)]
        judged = (
            f"trained on {len(inner.train_speakers)} of the training speakers and judged on "
            f"the other {n_val}"
        )
    argv = ["tune", "--model", ds.model, "--train_manifest", str(search_train), *judge,
            "--output_dir", str(study), "--seed", str(a.seed), "--report_to", "none",
            "--n_trials", str(a.tune_trials), "--keep_best", "1"]  # fmt: skip
    argv += ["--num_train_epochs", f"{a.epochs:g}"] if a.epochs is not None else []
    argv += ["--language", ds.language] if ds.language else []
    argv += ["--max_steps", "1"] if a.quick else []
    t0 = time.perf_counter()
    if cli(argv) != 0:
        raise RuntimeError(f"fitwhisper tune failed (its log above; the study is in {study})")
    search_s = time.perf_counter() - t0
    best = study / "best_config.yaml"
    model, loop_s, run_s, applied = train_fitwhisper(
        ds, train_m, out / "run", None, a.seed, 1 if a.quick else None,
        ["--config", str(best), "--no-score_before"],
    )  # fmt: skip
    # trials.md's last line says which trial best_config.yaml holds, and why.
    chosen = (study / "trials.md").read_text().strip().splitlines()[-1]
    note = (
        f"{a.tune_trials} trials ({search_s / 60:.0f} min) {judged}; {chosen}; trained on all "
        f"{len(split.train_speakers)}: {applied}"
    )
    return model, loop_s, run_s, note


def train_standard(
    ds: DataSet, train_m: Path, out: Path, epochs: float, seed: int, max_steps: int | None
) -> tuple[str, float, float]:
    """bench/baseline_recipe.py's trainer, saved as a model folder."""
    from fitwhisper.models.resolve import resolve_model

    model_dir = str(resolve_model(ds.model).path_or_id)
    timer = _Timer()
    t0 = time.perf_counter()
    processor, data = baseline_recipe.prepare(model_dir, str(train_m), ds.language)
    trainer = baseline_recipe.make_trainer(
        model_dir,
        processor,
        data,
        out,
        language=ds.language,
        batch_size=BATCH,
        lr=STANDARD_LR,
        epochs=epochs,
        seed=seed,
        max_steps=max_steps or -1,
        callbacks=[timer.callback],
    )
    trainer.train()
    final = out / "final"
    trainer.save_model(str(final))
    processor.save_pretrained(str(final))
    return str(final), timer.seconds, time.perf_counter() - t0


def score(
    key: str, model: str, eval_m: Path, ds: DataSet, out: Path, beam_size: int = 1
) -> Outcome:
    """Generation at 30 s input on the held-out clips (greedy unless `beam_size`),
    fitwhisper's scorer."""
    from fitwhisper.evaluate import evaluate_manifest

    res = evaluate_manifest(
        model,
        eval_m,
        language=ds.language,
        batch_size=BATCH,
        generation_max_length=ds.generation_max_length,
        encoder_window="full",
        beam_size=beam_size,
    )
    res.write(out)
    utts = res.utterances()
    return Outcome(
        key=key,
        model=model,
        errors=[u["errors"] for u in utts],
        units=[u["ref_units"] for u in utts],
        ids=[u["id"] for u in utts],
        rate=res.score.normalized,
        script_share=res.extra_figures().get("script", {}).get("share_in_expected_script"),
    )


def split_set(ds: DataSet, a: argparse.Namespace) -> Split:
    """The set's split for the command's sizes and seed."""
    rows = load_rows(ds)
    try:
        return speaker_split(
            rows, a.train_speakers, a.eval_speakers, a.seed, ds.stratum, a.clips_per_speaker
        )
    except SplitError as e:
        raise SplitError(f"--set {ds.key} ({ds.folder}): {e}") from None


def run_set(ds: DataSet, split: Split, a: argparse.Namespace, work: Path) -> str:
    """Train each recipe on the split's training speakers, score each on its held-out ones;
    the set's markdown section."""
    folder = work / ds.key
    train_m = train_speed._write(folder, "train", split.train, folder)
    eval_m = train_speed._write(folder, "eval", split.eval, folder)
    (folder / "split.json").write_text(
        json.dumps(
            {"train_speakers": split.train_speakers, "eval_speakers": split.eval_speakers}, indent=1
        )
    )
    max_steps = 1 if a.quick else None
    outcomes = []
    trained = set()  # rows run (not read back) here: a decoding row of one runs again too
    for key in a.recipes:
        out = folder / key
        conditions = row_conditions(ds, split, key, a)
        retrained = key in DECODING_ROWS and model_row(key) in trained
        if not retrained and (saved := load_outcome(out, conditions)) is not None:
            print(f"[{ds.key}] {key}: {100 * saved.rate:.2f}% (kept from {out})", flush=True)
            outcomes.append(saved)
            continue
        print(f"[{ds.key}] {key} ...", flush=True)
        t0 = time.perf_counter()
        if key in DECODING_ROWS:
            source, beams = DECODING_ROWS[key]
            model = next(o.model for o in outcomes if o.key == source)
            outcome = score(key, model, eval_m, ds, out / "eval", beam_size=beams)
        elif key == "zero-shot":
            outcome = score(key, ds.model, eval_m, ds, out / "eval")
        elif key == "tuned":
            model, loop_s, run_s, note = tune_fitwhisper(ds, split, train_m, out, a, conditions)
            outcome = score(key, model, eval_m, ds, out / "eval")
            outcome.loop_s, outcome.run_s, outcome.note = loop_s, run_s, note
        elif key == "standard":
            epochs = row_epochs(key, a)
            model, loop_s, run_s = train_standard(ds, train_m, out, epochs, a.seed, max_steps)
            outcome = score(key, model, eval_m, ds, out / "eval")
            outcome.loop_s, outcome.run_s, outcome.note = loop_s, run_s, STANDARD_NOTE
        else:
            model, loop_s, run_s, applied = train_fitwhisper(
                ds, train_m, out, row_epochs(key, a), a.seed, max_steps, TRAIN_OPTIONS[key]
            )
            outcome = score(key, model, eval_m, ds, out / "eval")
            outcome.loop_s, outcome.run_s, outcome.note = loop_s, run_s, applied
        seconds = time.perf_counter() - t0
        print(f"[{ds.key}] {key}: {100 * outcome.rate:.2f}% ({seconds:.0f} s)", flush=True)
        save_outcome(out, conditions, outcome)
        outcomes.append(outcome)
        trained.add(key)
    section = format_section(ds, split, outcomes, a)
    if not a.long_form:
        return section

    def single_at_beam(key: str, model: str) -> Outcome:
        out = folder / key / f"beam{long_form_quality.BEAM}"
        conditions = row_conditions(ds, split, key, a) | {"beam_size": long_form_quality.BEAM}
        if (saved := load_outcome(out, conditions)) is not None:
            return saved
        outcome = score(key, model, eval_m, ds, out / "eval", beam_size=long_form_quality.BEAM)
        save_outcome(out, conditions, outcome)
        return outcome

    trained_rows = [o for o in outcomes if o.key not in DECODING_ROWS]
    long_form = long_form_quality.measure(
        ds, trained_rows, single_at_beam, folder / "long-form", a.seed, split.eval
    )
    return section + "\n\n" + long_form


# --- rows kept between runs ---------------------------------------------------------------
# A finished row is saved in its folder with what it was measured under, so a run given the
# same --work reads it back instead of training again: the Mandarin set's rows take hours
# on a 2-core machine, more than one sitting, and pairing by clip needs every row's
# per-clip errors. Anything that changes the row (split, epochs, seed, options, trials)
# makes it run again.

OUTCOME_FILE = "outcome.json"


def row_conditions(ds: DataSet, split: Split, key: str, a: argparse.Namespace) -> dict:
    """What a row's figures depend on, as JSON-ready values."""
    if key in DECODING_ROWS:  # the scored row's model, decoded otherwise
        source, beams = DECODING_ROWS[key]
        return row_conditions(ds, split, source, a) | {"recipe": key, "beam_size": beams}
    conditions = {
        "set": ds.key,
        "model": ds.model,
        "recipe": key,
        "train": sorted(r["audio"] for r in split.train),
        "eval": sorted(r["audio"] for r in split.eval),
        "epochs": row_epochs(key, a),
        "seed": a.seed,
        "quick": a.quick,
        "options": TRAIN_OPTIONS.get(key, []),
    }
    if key == "zero-shot":  # nothing trains: only the held-out clips matter
        conditions.update(train=[], epochs=None, seed=None, options=[])
    elif key != "standard":  # `fitwhisper train`: what its options default to
        conditions["defaults"] = fitwhisper_defaults()
    if key == "tuned":  # and what `tune` does with the options it is not given
        from fitwhisper.tune_config import TuneConfig

        conditions.update(
            trials=a.tune_trials,
            val_speakers=None if a.tune_folds > 1 else a.tune_val_speakers,
            folds=a.tune_folds,
            tune=asdict(TuneConfig()),
        )
    return conditions


def fitwhisper_defaults() -> dict:
    """What `fitwhisper train` does with the options a row leaves alone, so a row measured
    under earlier defaults is run again rather than read back."""
    from fitwhisper import recipes
    from fitwhisper.config import DataConfig, ModelConfig, TrainConfig

    values = {cls.__name__: asdict(cls()) for cls in (ModelConfig, DataConfig, TrainConfig)}
    values["lora_learning_rate"] = recipes.LORA_LEARNING_RATE
    values["epochs_rule"] = [recipes.MIN_OPTIMIZER_STEPS, recipes.MAX_EPOCHS]
    return json.loads(json.dumps(values, default=str))  # as a reread record holds them


def save_outcome(out: Path, conditions: dict, outcome: Outcome) -> None:
    out.mkdir(parents=True, exist_ok=True)
    record = {"conditions": conditions, "outcome": asdict(outcome)}
    (out / OUTCOME_FILE).write_text(json.dumps(record, indent=1))


def load_outcome(out: Path, conditions: dict) -> Outcome | None:
    """The row saved in `out` if it was measured under `conditions`, else None."""
    try:
        record = json.loads((out / OUTCOME_FILE).read_text())
    except (OSError, ValueError):
        return None
    if record.get("conditions") != conditions:
        return None
    return Outcome(**record["outcome"])


# --- the table ----------------------------------------------------------------------------


def format_section(ds: DataSet, split: Split, outcomes: list[Outcome], a) -> str:
    from fitwhisper.report.stats import paired_bootstrap

    by_key = {o.key: o for o in outcomes}
    for o in outcomes:  # pairing needs the same clips in the same order
        assert o.ids == outcomes[0].ids, f"{o.key} scored other clips"
    metric = ds.metric
    # Clip ids are the manifest's audio paths (train_speed._write resolves them).
    audio_group = {str(Path(r["audio"]).resolve()): split.strata[r["speaker"]] for r in split.eval}
    groups = sorted(set(audio_group.values())) if ds.breakdown else []
    head = [
        "recipe",
        "training clips (speakers)",
        "held-out clips (speakers)",
        f"{metric} %",
        "vs standard recipe, points (95% CI)",
        "vs zero-shot, points (95% CI)",
    ]
    head += [f"{g} {metric} %" for g in groups]
    if ds.language == "zh":
        head.append("Traditional %")
    head.append("training s (loop / whole run)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    n_train = f"{len(split.train)} ({len(split.train_speakers)})"
    n_eval = f"{len(split.eval)} ({len(split.eval_speakers)})"

    def versus(o: Outcome, ref: str) -> str:
        if o.key == ref or ref not in by_key:
            return ""
        b = paired_bootstrap(by_key[ref].errors, o.errors, o.units, seed=a.seed)
        interval = "" if b["low"] is None else f" ({100 * b['low']:+.1f} to {100 * b['high']:+.1f})"
        return f"{100 * b['difference']:+.1f}{interval}"

    for o in outcomes:
        cells = [
            RECIPES[o.key],
            "0" if model_row(o.key) == "zero-shot" else n_train,
            n_eval,
            f"{100 * o.rate:.1f}",
            versus(o, "standard"),
            versus(o, "zero-shot"),
        ]
        for g in groups:
            e = sum(x for x, i in zip(o.errors, o.ids, strict=True) if audio_group[i] == g)
            u = sum(x for x, i in zip(o.units, o.ids, strict=True) if audio_group[i] == g)
            cells.append(f"{100 * e / u:.1f}" if u else "")
        if ds.language == "zh":
            cells.append("" if o.script_share is None else f"{100 * o.script_share:.1f}")
        cells.append("" if o.loop_s is None else f"{o.loop_s:.0f} / {o.run_s:.0f}")
        lines.append("| " + " | ".join(cells) + " |")

    kinds = ", ".join(
        f"{g}: {sum(split.strata[s] == g for s in split.train_speakers)} training / "
        f"{sum(split.strata[s] == g for s in split.eval_speakers)} held-out speakers"
        for g in sorted(set(split.strata.values()))
    )
    if a.quick:
        run = "1 optimizer step (--quick)"
    elif a.epochs is not None:
        run = f"{a.epochs:g} epoch(s) unless a row says"
    else:
        run = "epochs as each row says"
    notes = [
        f"### `{ds.model}` on {ds.title}",
        "",
        f"Speaker-disjoint split, seed {a.seed} ({kinds}); {run}, batch {BATCH}, seed "
        f"{a.seed} in every recipe; scored by greedy generation (beam search where a row "
        f"says so) at 30 s input, {metric} "
        "after fitwhisper's normaliser for the language. Differences: recipe minus the "
        "named row, in percentage points, paired by clip.",
        "",
        *lines,
        "",
    ]
    notes += [f"- {RECIPES[o.key]}: {o.note}." for o in outcomes if o.note]
    for key, ref in PAIRS:
        if key in by_key and ref in by_key:
            notes.append(
                f"- {RECIPES[key]} minus {RECIPES[ref]}: {versus(by_key[key], ref)} points."
            )
    return "\n".join(notes)


def _header(command: list[str], seconds: float) -> str:
    import torch
    import transformers

    import fitwhisper

    device = (
        torch.cuda.get_device_name(0)
        if torch.cuda.is_available()
        else f"CPU ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"
    )
    return (
        f"`{' '.join(['python bench/quality.py', *command])}` on {device}: "
        f"{seconds / 60:.1f} min in all. fitwhisper {fitwhisper.__version__}, torch "
        f"{torch.__version__}, transformers {transformers.__version__}, Python "
        f"{platform.python_version()}."
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", choices=("en", "zh", "all"), default="all", help="Which set.")
    ap.add_argument("--train_speakers", type=int, default=40, help="Speakers to train on.")
    ap.add_argument("--eval_speakers", type=int, default=20, help="Speakers held out.")
    ap.add_argument(
        "--clips_per_speaker",
        type=int,
        default=None,
        help="Keep each chosen speaker's first N clips (default: all).",
    )
    ap.add_argument(
        "--epochs",
        type=float,
        default=None,
        help="Epochs of every trained row (default: each row's own: 3 for the standard "
        "recipe and Whisper-Finetune's LoRA, train's for fitwhisper's rows).",
    )
    ap.add_argument(
        "--model",
        default=None,
        help="The model every row starts from (default: the set's own, offline/tiny.en for "
        "en and offline/base for zh); a multilingual model on en is prompted in English. "
        "Give each model its own --work.",
    )
    ap.add_argument("--seed", type=int, default=42, help="Split, training and bootstrap seed.")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="2 training and 2 held-out speakers, 1 clip each, 1 step a recipe.",
    )
    ap.add_argument(
        "--recipes",
        default=",".join(DEFAULT_RECIPES),
        help=f"Comma-separated rows to measure, of: {', '.join(RECIPES)} (default: "
        f"{','.join(DEFAULT_RECIPES)}).",
    )
    ap.add_argument(
        "--tune_trials", type=int, default=8, help="The tuned row's trials (default 8)."
    )
    ap.add_argument(
        "--tune_val_speakers",
        type=int,
        default=10,
        help="Training speakers the tuned row's search holds out to judge its trials.",
    )
    ap.add_argument(
        "--tune_folds",
        type=int,
        default=1,
        help="Judge the tuned row's trials by `tune --folds N` (cross-validation over every "
        "training speaker) instead of on --tune_val_speakers held out (default 1: held out).",
    )
    ap.add_argument(
        "--long_form",
        action="store_true",
        help="Also join the held-out clips into recordings of minutes and score every "
        "row's model on them as `fitwhisper transcribe` does (bench/long_form_quality.py).",
    )
    ap.add_argument("--out", default=None, help="Also write the markdown here.")
    ap.add_argument(
        "--work",
        default=None,
        help="Keep runs here (default: a temp folder). A row this folder already holds, "
        "measured on the same split with the same epochs, seed and options, is read back "
        "instead of run again, so a long set can be measured over several sittings.",
    )
    a = ap.parse_args(argv)
    a.recipes = [r.strip() for r in a.recipes.split(",") if r.strip()]
    if unknown := [r for r in a.recipes if r not in RECIPES]:
        ap.error(f"--recipes: unknown {', '.join(unknown)}; choose from {', '.join(RECIPES)}")
    for key, (source, _) in DECODING_ROWS.items():
        if key in a.recipes and source not in a.recipes[: a.recipes.index(key)]:
            ap.error(f"--recipes: {key} scores the model of the {source} row: name {source} first")
    if a.quick:
        a.train_speakers, a.eval_speakers, a.clips_per_speaker = 2, 2, 1
        a.tune_trials, a.tune_val_speakers = 2, 1
    if "tuned" in a.recipes and a.tune_folds < 1:
        ap.error("--tune_folds must be at least 1")
    if "tuned" in a.recipes and not 0 < a.tune_val_speakers < a.train_speakers:
        ap.error("--tune_val_speakers must be at least 1 and fewer than --train_speakers")
    if a.clips_per_speaker is not None and a.clips_per_speaker < 1:
        ap.error("--clips_per_speaker must be at least 1 (or left out for all clips)")
    import torch

    torch.set_num_threads(train_speed.THREADS)
    work = Path(a.work or tempfile.mkdtemp(prefix="fw-quality-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:  # every split checked before anything trains
        sets = [
            with_model(SETS[k], a.model) for k in (("en", "zh") if a.set == "all" else (a.set,))
        ]
        splits = [(ds, split_set(ds, a)) for ds in sets]
    except (SetError, SplitError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sections = [run_set(ds, split, a, work) for ds, split in splits]
    command = argv if argv is not None else sys.argv[1:]
    text = "\n\n".join([_header(command, time.perf_counter() - t0), *sections]) + "\n"
    print(text, flush=True)
    if a.out:
        Path(a.out).write_text(text)
    print(f"runs and per-clip predictions: {work}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
