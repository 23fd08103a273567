"""Models by name: any pydantic-ai model string, plus ctxhub's offline models.

The chat model and the summariser are chosen separately (``ModelChoice``), so a cheaper model
can summarise for an expensive one. Names starting with ``offline:`` resolve to the built-in
offline models and nothing else; every other name goes to pydantic-ai's ``infer_model``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic_ai.models import Model, infer_model

from .offline import OFFLINE_DEMO, OFFLINE_EXTRACTIVE, demo_model, extractive_model

OFFLINE_PREFIX = "offline:"
OFFLINE_MODELS = (OFFLINE_DEMO, OFFLINE_EXTRACTIVE)
DEFAULT_CHAT_MODEL = OFFLINE_DEMO
DEFAULT_SUMMARIZER = OFFLINE_EXTRACTIVE


class UnknownOfflineModel(ValueError):
    """An ``offline:`` name that is not one of ctxhub's offline models."""


def is_offline(model: Model | str) -> bool:
    """Whether a model (or name) is one of the offline models."""
    name = model if isinstance(model, str) else model.model_name
    return name.startswith(OFFLINE_PREFIX)


def resolve_model(model: Model | str) -> Model:
    """The pydantic-ai model for a name ("openai:gpt-4o", "offline:demo", …) or model."""
    if isinstance(model, Model):
        return model
    if model.startswith(OFFLINE_PREFIX):
        if model == OFFLINE_DEMO:
            return demo_model()
        if model == OFFLINE_EXTRACTIVE:
            return extractive_model()
        raise UnknownOfflineModel(
            f"{model!r} is not an offline model; choose one of {', '.join(OFFLINE_MODELS)}"
        )
    return infer_model(model)


@dataclass(frozen=True)
class ModelChoice:
    """The chat model and the summariser, by name; the summariser defaults sensibly."""

    chat: str = DEFAULT_CHAT_MODEL
    summarizer: str | None = None
    """None: the offline extractive summariser for an offline chat model, else the chat model."""

    @property
    def summarizer_name(self) -> str:
        """The summariser's name once the default is applied."""
        if self.summarizer:
            return self.summarizer
        return DEFAULT_SUMMARIZER if is_offline(self.chat) else self.chat

    def chat_model(self) -> Model:
        """The chat model."""
        return resolve_model(self.chat)

    def summarizer_model(self) -> Model:
        """The summariser model."""
        return resolve_model(self.summarizer_name)
