"""Logging set-up for the command line; library modules only call `logging.getLogger(__name__)`."""

from __future__ import annotations

import logging
import os
import sys

LOGGER_NAME = "fitwhisper"


def setup_logging(verbosity: int = 0) -> None:
    """Send fitwhisper's log records to stderr.

    Args:
        verbosity: -1 quiet (warnings only), 0 normal (info), 1+ debug.
    """
    level = logging.WARNING if verbosity < 0 else logging.INFO if verbosity == 0 else logging.DEBUG
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(level)
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.propagate = False
    generation_log = logging.getLogger("transformers.generation.utils")
    if not any(isinstance(f, _HarmlessGenerationWarnings) for f in generation_log.filters):
        generation_log.addFilter(_HarmlessGenerationWarnings())
    bnb_cpu_log = logging.getLogger("bitsandbytes.backends.cpu.ops")
    if not any(isinstance(f, _OptionalHubKernelNotice) for f in bnb_cpu_log.filters):
        bnb_cpu_log.addFilter(_OptionalHubKernelNotice())
    os.environ["FITWHISPER_QUIET"] = "1" if verbosity < 0 else ""


class _HarmlessGenerationWarnings(logging.Filter):
    """Drops two warnings transformers 5 prints on every Whisper generate call, which would
    make users doubt correct results: Whisper's own generate passes its suppress-token lists
    next to generation_config, and its decoder prompts are never padded (every row of a batch
    starts with a prompt of the same length), so the missing attention mask changes nothing."""

    _PREFIXES = (
        "Passing `generation_config` together with generation-related",
        "The attention mask is not set with a batched input",
    )

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self._PREFIXES)


class _OptionalHubKernelNotice(logging.Filter):
    """Drops the notice bitsandbytes logs when `import peft` imports it on a CPU with
    AVX512-BF16: it could not fetch an optional faster 4-bit kernel from the Hub (the
    `kernels` package) and uses its own. Advice to fetch code at run time is not ours."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Failed to load CPU gemm_4bit_forward")


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is now, not the stream of the first call: main() may run
    many times in one process (tests, notebooks) with stderr swapped in between."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def progress_enabled() -> bool:
    """Progress bars only for a person watching: not with --quiet, not when stderr is piped."""
    return not os.environ.get("FITWHISPER_QUIET") and sys.stderr.isatty()
