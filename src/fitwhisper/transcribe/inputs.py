"""Which files to transcribe: files, folders and list files, with one problem per bad input.

A missing file or a folder without audio does not stop the others: each becomes an
`InputProblem` that the command reports (one paragraph each) and counts in its exit code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fitwhisper.errors import DataError

# Extensions soundfile or PyAV decode (data/audio.py); others in a folder are ignored.
AUDIO_EXTENSIONS = frozenset(
    ".wav .flac .mp3 .ogg .opus .oga .m4a .aac .webm .mp4 .mkv .mov .wma .aiff .aif".split()
)


@dataclass(frozen=True)
class InputProblem:
    """An input that cannot be transcribed, with what to do about it."""

    source: str  # the file or folder as the user named it
    message: str
    hint: str | None = None

    def format(self) -> str:
        text = f"error: {self.source}: {self.message}"
        return text + (f"\n  hint: {self.hint}" if self.hint else "")


def collect_inputs(
    paths: list[str], audio_list: str | None = None
) -> tuple[list[Path], list[InputProblem]]:
    """Expand `paths` (files or folders, searched recursively for audio) and the lines of
    `audio_list` into audio files, in the order given; duplicates are kept once.

    Raises:
        DataError: `audio_list` itself cannot be read (nothing would be transcribed).
    """
    named: list[str] = list(paths)
    if audio_list:
        named += _read_list(Path(audio_list))
    files: list[Path] = []
    problems: list[InputProblem] = []
    for text in named:
        path = Path(text).expanduser()
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*") if p.suffix.lower() in AUDIO_EXTENSIONS and p.is_file()
            )
            if not found:
                problems.append(
                    InputProblem(
                        text,
                        "the folder holds no audio files",
                        "audio files end in " + ", ".join(sorted(AUDIO_EXTENSIONS)),
                    )
                )
            files += found
        elif path.is_file():
            files.append(path)
        else:
            problems.append(
                InputProblem(text, "no such file", "check the path (relative to this folder)")
            )
    unique = list(dict.fromkeys(files))
    return unique, problems


def _read_list(path: Path) -> list[str]:
    """Paths in a list file, one a line; blank lines and # comments are skipped; relative
    paths are relative to the list file's folder."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(
            f"cannot read the audio list {path}: {e}",
            hint="--audio-list takes a text file with one audio path per line",
        ) from e
    out = []
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            p = Path(line).expanduser()
            out.append(str(p if p.is_absolute() else path.parent / p))
    return out
