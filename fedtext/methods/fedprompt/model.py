"""FedPrompt's model: one soft prompt, averaged."""

from __future__ import annotations

from fedtext.learning.model import PromptModel


class FedPromptModel(PromptModel):
    """The global array is the prompt itself, started at p0 (T seeded natural tokens)."""
