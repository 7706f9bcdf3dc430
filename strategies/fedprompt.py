"""FedPrompt baseline: soft prompt tuning with back-propagation, FedAvg of the prompt.

"Prompt Tuning (Fed)" of FedDLS App. C (Guo et al. 2022; Zhao et al. 2023): the only
trainable (and communicated) parameters are T prompt vectors; the PLM stays frozen.

Client must: start from the downloaded prompt ``[T, D]`` (float32), take
``local-steps`` Adam steps (``lr``, ``batch-size``) through the frozen backbone on its
labelled shots, and upload the prompt. Bytes per client-round, each way:
``T * D * 4 + 128`` (T=8, D=384: 12,416 B).
"""

from __future__ import annotations

import numpy as np

from fedtext.strategy import FedTextStrategy


class FedPrompt(FedTextStrategy):
    """FedAvg (example-weighted, FedAvg's own ``aggregate_fit``) of soft prompts."""

    def initial_arrays(self) -> list[np.ndarray]:
        """p0: embeddings of T natural tokens drawn with the run seed (as BBT)."""
        return [self.backbone.initial_prompt(self.cfg.prompt_length, self.cfg.seed)]

    def prompt_of(self, arrays: list[np.ndarray]) -> np.ndarray:
        return arrays[0]
