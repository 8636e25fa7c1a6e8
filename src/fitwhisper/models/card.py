"""The model card: README.md in a trained model's folder, in the Hugging Face Hub's format.

Front matter that huggingface_hub's `ModelCard` parses (base model, languages, tags and a
`model-index` with the held-out metrics) and a body for people: the data the run saw, the
options that shaped it, the held-out error before and after, the regression set, the
exports (`fitwhisper export` adds that section) and the command that reproduces the run.
Every figure is read from the run folder's own files (fitwhisper.yaml, data_report*.json/
csv, eval/metrics.json, eval/before/metrics.json, eval/regression.json), so the card
says what the run measured and nothing else.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import yaml

from fitwhisper.method import TrainingMethod, method_of

CARD = "README.md"
EXPORTS_HEADING = "## Exports"
# Bases whose licence is known; any other base leaves the field out rather than guess.
_LICENSES = {"openai/whisper": "apache-2.0", "MediaTek-Research/Breeze-ASR-25": "apache-2.0"}


@dataclass(frozen=True)
class RunFacts:
    """What a run folder says about itself, as the card reports it."""

    run_dir: Path
    record: dict
    data: dict  # data_report.json
    train_hours: float
    train_languages: list[str]
    after: dict | None  # eval/metrics.json
    before: dict | None  # eval/before/metrics.json
    regression: dict | None  # eval/regression.json

    @classmethod
    def read(cls, run_dir: Path) -> RunFacts:
        run_dir = Path(run_dir)
        hours, languages = _train_audio(run_dir / "data_report_train.csv")
        return cls(
            run_dir=run_dir,
            record=yaml.safe_load((run_dir / "fitwhisper.yaml").read_text()) or {},
            data=_json(run_dir / "data_report.json") or {},
            train_hours=hours,
            train_languages=languages,
            after=_json(run_dir / "eval" / "metrics.json"),
            before=_json(run_dir / "eval" / "before" / "metrics.json"),
            regression=_json(run_dir / "eval" / "regression.json"),
        )

    @property
    def base_model(self) -> str:
        return hub_id_of(str(self.record.get("model", {}).get("model", "")))

    @property
    def languages(self) -> list[str]:
        resolved = (self.record.get("resolved") or {}).get("language")
        found = [resolved] if isinstance(resolved, str) else list(self.train_languages)
        if not found and self.base_model.endswith(".en"):
            found = ["en"]
        return sorted(set(found))


def hub_id_of(spec: str) -> str:
    """The Hub id of a base model spec: offline/tiny.en holds openai/whisper-tiny.en's
    weights; a Hub id stays; a local folder is named by its folder."""
    if spec.startswith("offline/"):
        return "openai/whisper-" + spec.split("/", 1)[1]
    if spec.count("/") == 1 and not Path(spec).exists():
        return spec
    return Path(spec).name or spec


def percent(fraction: float) -> float:
    """A metrics.json fraction as the card's percentage (2 decimals, the Hub's habit)."""
    return round(100 * fraction, 2)


def run_card(run_dir: Path, *, model_name: str | None = None) -> str:
    """The card's text for a finished run folder."""
    from huggingface_hub import EvalResult, ModelCardData

    facts = RunFacts.read(run_dir)
    name = model_name or Path(run_dir).resolve().name
    results = []
    if facts.after is not None:
        m = facts.after["metric"]
        results.append(
            EvalResult(
                task_type="automatic-speech-recognition",
                task_name="Speech recognition",
                dataset_type="custom",
                dataset_name=_manifest_name(facts, "eval"),
                dataset_split="held-out",
                metric_type=m,
                metric_name=f"{m.upper()} ({_short(facts.after['normalizer'])} normaliser)",
                metric_value=percent(facts.after[m]),
            )
        )
    base = facts.base_model
    license_ = next((v for k, v in _LICENSES.items() if base.startswith(k)), None)
    data = ModelCardData(
        model_name=name,
        base_model=base or None,
        language=facts.languages or None,
        license=license_,
        library_name="transformers",
        pipeline_tag="automatic-speech-recognition",
        tags=["whisper", "fitwhisper", _method(facts.record).name],
        eval_results=results or None,
    )
    body = [
        f"# {name}",
        "",
        f"A fine-tune of [{base}](https://huggingface.co/{base}) by "
        f"[fitwhisper](https://pypi.org/project/fitwhisper/) ({_method(facts.record).title}).",
        "",
        *_data_section(facts),
        *_results_section(facts),
        *_options_section(facts),
        "## Reproduce",
        "",
        "```bash",
        "fitwhisper train --config fitwhisper.yaml  # the run record, beside this card",
        "```",
        "",
    ]
    return f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(body)


def write_run_card(run_dir: Path, folder: Path) -> Path:
    """README.md (and the run record it points at) into `folder`, e.g. RUN/final/."""
    import shutil

    path = Path(folder) / CARD
    path.write_text(run_card(run_dir), encoding="utf-8")
    shutil.copyfile(Path(run_dir) / "fitwhisper.yaml", Path(folder) / "fitwhisper.yaml")
    return path


def with_exports(card: str, table: str) -> str:
    """`card` with its Exports section set to `table`: replaced where there is one, else
    put before Reproduce (or at the end)."""
    section = f"{EXPORTS_HEADING}\n\n{table.strip()}\n\n"
    at = card.find("\n" + EXPORTS_HEADING + "\n")
    if at >= 0:
        after = card.find("\n## ", at + 1)
        rest = card[after + 1 :] if after >= 0 else ""
        return card[: at + 1] + section + rest
    at = card.find("\n## Reproduce")
    if at < 0:
        return card.rstrip("\n") + "\n\n" + section
    return card[: at + 1] + section + card[at + 1 :]


def plain_card(model_spec: str, language: str | None) -> str:
    """A card for an export whose source is not a fitwhisper run (no run record)."""
    from huggingface_hub import ModelCardData

    base = hub_id_of(model_spec)
    data = ModelCardData(
        base_model=base or None,
        language=[language] if language else None,
        library_name="transformers",
        pipeline_tag="automatic-speech-recognition",
        tags=["whisper", "fitwhisper"],
    )
    return (
        f"---\n{data.to_yaml()}\n---\n\n# {base}\n\nExported by fitwhisper from `{model_spec}`.\n"
    )


# --- sections -----------------------------------------------------------------------------


def _data_section(facts: RunFacts) -> list[str]:
    rows = ["## Training data", ""]
    for split in ("train", "eval"):
        d = facts.data.get(split)
        if not d:
            continue
        if d.get("streamed"):
            rows.append(_streamed_line(d))
            continue
        problems = d.get("problems") or {}
        skipped = d.get("rows", 0) - d.get("used", 0)
        what = ", ".join(f"{n} {k}" for k, n in sorted(problems.items())) or "none"
        label = "training" if split == "train" else "held-out"
        rows.append(
            f"- {label}: {d.get('used', 0)} clips used of {d.get('rows', 0)} rows "
            f"(`{Path(str(d.get('manifest', ''))).name}`); skipped by the data check: "
            f"{skipped} (problems: {what})"
        )
    if facts.train_hours:
        rows.append(f"- training audio: {facts.train_hours:.2f} hours")
    if facts.languages:
        rows.append(f"- languages: {', '.join(facts.languages)}")
    return [*rows, ""]


def _streamed_line(d: dict) -> str:
    """A streamed training source (train/streamed.py): counted by its index, checked as it
    was trained on."""
    clips = f"{d['rows']} clips" if d.get("rows") else "clips not counted"
    skipped = d.get("skipped_while_streaming")
    line = (
        f"- training: streamed from `{Path(str(d.get('manifest', ''))).name}` ({clips} in "
        f"{d.get('shards')} shards), checked as trained on; bad clips skipped: "
        f"{'not recorded' if skipped is None else skipped}"
    )
    parts = d.get("sources") or []
    if len(parts) < 2:
        return line
    line = line.replace("streamed from", "streamed as a mix of its sources, first", 1)
    for p in parts:
        hours = "hours not counted" if p.get("hours") is None else f"{p['hours']:.2f} hours"
        weight = 1 if p.get("weight") is None else p["weight"]
        line += (
            f"\n  - `{p['source']}`: weight {weight:g}, {100 * p['share']:.1f}% of the clips "
            f"drawn; {p.get('rows') or 'uncounted'} clips, {hours}"
        )
    return line


def _results_section(facts: RunFacts) -> list[str]:
    out = ["## Results", ""]
    if facts.after is None:
        return [*out, "No held-out set was scored (`--eval_manifest`).", ""]
    m = facts.after["metric"]
    out += [
        f"Held-out {m.upper()} by generation ({_short(facts.after['normalizer'])} normaliser), "
        f"{facts.after.get('n_utterances', '?')} clips:",
        "",
        "| model | " + m.upper() + " |",
        "|---|---|",
    ]
    if facts.before is not None and facts.before.get("metric") == m:
        out.append(f"| {facts.base_model} (before fine-tuning) | {percent(facts.before[m])}% |")
    out += [f"| this model | {percent(facts.after[m])}% |", ""]
    if facts.regression:
        r = facts.regression
        rm = r["metric"]
        out += [
            f"Regression set (what the base could do before; "
            f"`{Path(str(r.get('manifest', ''))).name}`, {r.get('n_utterances', '?')} clips): "
            f"{rm.upper()} {percent(r['before'][rm])}% before, {percent(r['after'][rm])}% after.",
            "",
        ]
        if lid := r.get("language_id"):
            # What `transcribe` without --language relies on (evaluate/language_id.py).
            out += [
                f"Language identification on the same clips (the language each is spoken "
                f"in, detected as Whisper does without `--language`): "
                f"{percent(lid['before']['share'])}% right before, "
                f"{percent(lid['after']['share'])}% after.",
                "",
            ]
    return out


def _options_section(facts: RunFacts) -> list[str]:
    model = facts.record.get("model", {})
    train = facts.record.get("train", {})
    keys = {
        "model": (
            "model",
            "language",
            "task",
            "output_script",
            "method",
            "lora_r",
            "freeze_encoder",
        ),
        "train": (
            "learning_rate",
            "num_train_epochs",
            "max_steps",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "lr_scheduler_type",
            "warmup_steps",
            "seed",
            "bf16",
            "fp16",
            "encoder_input",
            "pack_clips",
            "augment",
            "deepspeed",
        ),
    }
    out = ["## Training options", "", "| option | value |", "|---|---|"]
    method = _method(facts.record)
    # A record from before --method holds only the earlier flags: the method they name.
    model = {**model, "method": None if method.name == "full" else method.option}
    for section, names in keys.items():
        values = model if section == "model" else train
        for k in names:
            if k == "lora_r" and not method.adapters:
                continue
            if k in values and values[k] not in (None, False, -1):
                out.append(f"| `--{k}` | `{values[k]}` |")
    out += _augmentation_lines(facts.record)
    versions = facts.record.get("versions") or {}
    if versions:
        out += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items())]
    return [*out, ""]


# --- helpers ------------------------------------------------------------------------------


def _augmentation_lines(record: dict) -> list[str]:
    """What the training clips went through (the record's resolved augmentation), one line;
    none for a run without augmentation or a record from before it existed."""
    summary = (record.get("resolved") or {}).get("augmentation")
    if not isinstance(summary, dict) or not summary:
        return []
    parts = []
    if speeds := summary.get("speed_perturb"):
        parts.append("speed " + "/".join(f"{s:g}" for s in speeds))
    if noise := summary.get("noise"):
        low, high = noise["snr_db"]
        parts.append(
            f"noise ({noise['source']}) on {noise['share']:.0%} of the clips at "
            f"{low:g}-{high:g} dB SNR"
        )
    if gain := summary.get("gain_db"):
        parts.append(f"gain {gain[0]:g} to {gain[1]:g} dB")
    if spec := summary.get("spec_augment"):
        parts.append(
            f"SpecAugment masks over {spec['time_mask_share']:.0%} of each clip's "
            f"frames and {spec['freq_mask_share']:.0%} of its mel bins"
        )
    return [
        "",
        "Training clips were augmented on the fly (never the held-out clips): "
        + "; ".join(parts)
        + ".",
    ]


def _method(record: dict) -> TrainingMethod:
    """The method a run record names (`method`, or the earlier flags of an older record)."""
    return method_of(SimpleNamespace(**record.get("model", {})))


def _short(normalizer: str) -> str:
    """ "whisper_english (applied to ...)" -> "whisper_english"."""
    return normalizer.split(" (")[0]


def _manifest_name(facts: RunFacts, split: str) -> str:
    d = facts.data.get(split) or {}
    return Path(str(d.get("manifest", split))).name or split


def _train_audio(csv_path: Path) -> tuple[float, list[str]]:
    """Hours of the usable training clips and their languages, from the data check."""
    if not csv_path.is_file():
        return 0.0, []
    seconds, languages = 0.0, set()
    with csv_path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row.get("ok") != "True":
                continue
            seconds += float(row.get("duration_s") or 0)
            if row.get("language"):
                languages.add(row["language"])
    return seconds / 3600, sorted(languages)


def _json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
