"""`--push_to_hub --hub_model_id OWNER/NAME`: RUN/final/ (weights, processor, model card,
run record) uploaded to the Hugging Face Hub after training, with huggingface_hub, the
library Trainer's own upload uses.

The Hub is checked before any weights load, so an unreachable Hub costs a message, not a
training run; an upload that fails at the end leaves final/ in place and says how to
upload it later.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from fitwhisper.errors import ConfigError

log = logging.getLogger(__name__)


def problems(push_to_hub: bool, hub_model_id: str | None) -> list[str]:
    """Option problems, reported with the others before anything loads."""
    if hub_model_id and not push_to_hub:
        return ["--hub_model_id is only used with --push_to_hub"]
    if push_to_hub and (not hub_model_id or hub_model_id.count("/") != 1):
        return [
            "--push_to_hub needs --hub_model_id OWNER/NAME (the Hub repository to create or update)"
        ]
    return []


def check_reachable(hub_model_id: str) -> None:
    """Raise ConfigError (one paragraph) when the Hub cannot be reached or the user is not
    logged in: before training, not after it."""
    hint = (
        "drop --push_to_hub (the model stays in RUN/final/) and upload it later with "
        f"`hf upload {hub_model_id} RUN/final`"
    )
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise ConfigError(
            "--push_to_hub: the Hugging Face Hub is switched off here (HF_HUB_OFFLINE)", hint=hint
        )
    from huggingface_hub import HfApi

    try:
        HfApi().whoami()
    except Exception as e:  # no network, no token, a proxy error: all say the same to a user
        raise ConfigError(
            f"--push_to_hub: the Hugging Face Hub cannot be reached or you are not logged in "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no detail'})",
            hint=f"log in with `hf auth login`, or {hint}",
        ) from e


def push_final(final_dir: Path, hub_model_id: str) -> str | None:
    """Upload final/; the repository's URL, or None (logged) when the upload failed."""
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        api.create_repo(hub_model_id, exist_ok=True)
        info = api.upload_folder(
            repo_id=hub_model_id,
            folder_path=str(final_dir),
            commit_message="fitwhisper: fine-tuned model",
        )
    except Exception as e:
        log.error(
            "upload to the Hub failed (%s: %s); the model is in %s: upload it with "
            "`hf upload %s %s`",
            type(e).__name__,
            e,
            final_dir,
            hub_model_id,
            final_dir,
        )
        return None
    url = getattr(info, "repo_url", None) or f"https://huggingface.co/{hub_model_id}"
    log.info("pushed %s to %s", final_dir, url)
    return str(url)
