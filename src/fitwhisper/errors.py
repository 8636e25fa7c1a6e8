"""User-facing errors: a message that says what is wrong and a hint that says what to do.

Only `fitwhisper.cli.main` catches these; it prints them and exits 1. Anything else
that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations


class FitWhisperError(Exception):
    """A mistake the user can fix: bad path, bad manifest, bad option, model not loadable."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\nhint: {self.hint}"


class ConfigError(FitWhisperError):
    """Options that conflict or are out of range."""


class DataError(FitWhisperError):
    """A manifest or audio file that cannot be used."""


class ModelLoadError(FitWhisperError):
    """A model spec that cannot be resolved or loaded."""


class DivergenceError(FitWhisperError):
    """Training produced a NaN or Inf loss, gradient or weight; nothing of it was saved."""


class StorageError(FitWhisperError):
    """A file could not be written: the disk is full, read-only, or not ours to write."""


class OutOfMemoryError(FitWhisperError):
    """Device memory ran out and could not be recovered from."""
