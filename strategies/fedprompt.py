"""FedPrompt baseline: soft prompt tuning with back-propagation, FedAvg of the prompt.

"Prompt Tuning (Fed)" of FedDLS App. C (Guo et al. 2022; Zhao et al. 2023); config and
model: :mod:`fedtext.methods.fedprompt`.

Client must: start from the downloaded prompt ``[T, D]`` (float32), take
``fedprompt.local-steps`` Adam steps (``fedprompt.lr``, ``fedprompt.batch-size``)
through the frozen backbone on its labelled shots, and upload the prompt. Bytes per
client-round, each way: ``T * D * 4 + 128`` (T=8, D=384: 12,416 B).
"""

from __future__ import annotations

from fedtext.server.strategy import FedTextStrategy


class FedPrompt(FedTextStrategy):
    """FedAvg (example-weighted, the base :meth:`aggregate`) of soft prompts."""
