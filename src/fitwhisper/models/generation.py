"""Language and task in a model's generation config, so saved models transcribe correctly
in any transformers pipeline without extra arguments."""

from __future__ import annotations

from fitwhisper.errors import ConfigError


def language_for(model, language: str | None) -> str | None:
    """The language token to use: None for English-only models (which have none)."""
    if not getattr(model.generation_config, "is_multilingual", False):
        if language and language.lower() not in ("en", "english"):
            raise ConfigError(
                f"--language {language} was asked for, but this model is English-only",
                hint="use a multilingual model (e.g. openai/whisper-small or offline/base)",
            )
        return None
    return language


def configure_generation(model, language: str | None, task: str) -> None:
    """Store language and task in the generation config (multilingual models only)."""
    gen = model.generation_config
    multilingual = getattr(gen, "is_multilingual", False)
    gen.language = language if multilingual else None
    gen.task = task if multilingual else None
    # Old-style forced ids would override language/task and are deprecated for Whisper.
    gen.forced_decoder_ids = None
    model.config.forced_decoder_ids = None
