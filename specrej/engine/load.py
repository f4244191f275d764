"""The generator loaded as an `Engine`, with the prompt format it renders prompts in."""

from __future__ import annotations

from ..errors import SpecrejError, shown
from ..models.loading import load_generator
from .engine import Engine


def load_engine(model: str = "default", *, dtype: str = "auto", device: str = "auto",
                trust_remote_code: bool = False, revision: str | None = None, prompt_format: str = "auto",
                compile: str = "auto") -> Engine:
    """The generator `model` loaded, its prompts rendered as `prompt_format` says (auto, chat or
    plain: `Engine.PROMPT_FORMATS`); "chat" for a tokenizer without a chat template is refused.
    `trust_remote_code`: run the generator's own code (the reward's is `load_reward`'s to allow);
    `revision`: the hub revision of a hub id, kept as `engine.revision` (`api.run_prompts` records
    it). `compile`: the decode step compiled (auto, on, off: `graph_build.compile_ranges`)."""
    check_prompt_format(prompt_format)
    engine = Engine(*load_generator(model, dtype, device, trust_remote_code, revision=revision), compile=compile)
    engine.prompt_format = prompt_format
    engine.revision = revision
    if prompt_format == "chat" and not engine.tokenizer.chat_template:
        raise SpecrejError(f"--prompt-format chat: the tokenizer of {model} has no chat template (use plain, or "
                           "auto, which is plain for it)")
    return engine


def check_prompt_format(prompt_format: str) -> None:
    if prompt_format not in Engine.PROMPT_FORMATS:
        raise SpecrejError(f"--prompt-format must be one of {', '.join(Engine.PROMPT_FORMATS)}, got "
                           f"{shown(prompt_format)}")
