"""fitwhisper: fine-tune Whisper on your own audio without running out of GPU memory."""

__version__ = "0.1.0"

__all__ = ["__version__"]
