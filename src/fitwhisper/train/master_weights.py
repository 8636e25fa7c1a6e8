"""final/ in fp32 after a DeepSpeed run in bf16 or fp16, as after DDP.

DeepSpeed's bf16/fp16 modes cast the model itself to 16 bits and keep the fp32 master
weights in the optimizer, so `Trainer.save_model` writes the 16-bit copy: a final/ that
differs from the trained values by the rounding (about 3 significant digits in bf16) and
whose config says bfloat16. DDP's mixed precision keeps the weights in fp32 and saves them.
Here the trained fp32 values are written over the 16-bit ones, so the precision of final/
does not depend on the launcher.

A parameter that did not train has no master copy (LoRA's base, `--freeze_encoder`): it
is written up-cast from the 16-bit copy; an adapter's file holds trainable weights only.
"""

from __future__ import annotations

import json
from pathlib import Path


def write_fp32_master_weights(trainer, final_dir: Path) -> bool:
    """Overwrite the weights `trainer.save_model` wrote into `final_dir` with DeepSpeed's
    fp32 masters; every process calls it (under ZeRO-3 each master is gathered from all).

    Returns whether anything was written (False: no DeepSpeed, or it trained in fp32).
    """
    import torch

    if not getattr(trainer, "is_deepspeed_enabled", False):
        return False
    module = trainer.accelerator.unwrap_model(trainer.model)
    if all(p.dtype == torch.float32 for p in module.parameters() if p.is_floating_point()):
        return False
    masters = _gathered_masters(module)
    # The same whole state dict save_model wrote (a collective under ZeRO-3).
    state = trainer.accelerator.get_state_dict(trainer.deepspeed)
    if not trainer.args.should_save:
        return True
    for name, tensor in state.items():
        tensor = masters.get(name, tensor)
        state[name] = tensor.float().cpu() if tensor.is_floating_point() else tensor
    module.save_pretrained(str(final_dir), state_dict=state)
    _config_says_fp32(final_dir / "config.json")
    return True


def _gathered_masters(module) -> dict:
    """Every trainable parameter's fp32 master, by state-dict name, on the CPU."""
    from deepspeed.utils import safe_get_full_fp32_param

    masters: dict = {}
    by_param: dict[int, object] = {}
    # Every name of a tied parameter (Whisper's proj_out is its decoder's embed_tokens): one
    # name alone left the other with the 16-bit copy, and the reload untied them (H200).
    for name, param in module.named_parameters(remove_duplicate=False):
        if not param.requires_grad:  # no master; and ZeRO-3's getter expects one
            continue
        if id(param) not in by_param:
            full = safe_get_full_fp32_param(param)
            # ZeRO-3 leaves each parameter empty and records its shape aside.
            shape = getattr(param, "ds_shape", param.shape)
            by_param[id(param)] = (
                None if full is None else full.detach().float().cpu().reshape(shape)
            )
        if by_param[id(param)] is not None:
            masters[name] = by_param[id(param)]
    return masters


def _config_says_fp32(config_file: Path) -> None:
    """save_pretrained records the module's dtype (bfloat16): record what the file holds."""
    if not config_file.is_file():  # an adapter: its base keeps its own config
        return
    config = json.loads(config_file.read_text())
    for key in ("dtype", "torch_dtype"):
        if key in config:
            config[key] = "float32"
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
