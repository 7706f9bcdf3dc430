"""Fed P-tuning v2: deep prompts (prefix keys and values at every layer), FedAvg.

The "Fed P-tuning V2" baseline of FedDPG's Table 1 (Liu et al. 2022 in FL);
config and model: :mod:`fedtext.methods.fedptuning_v2`.

Client must: start from the downloaded ``prefix.key`` and ``prefix.value`` (float32
``[L, T, D]``), take ``fedptuning-v2.local-steps`` Adam steps (``fedptuning-v2.lr``,
``fedptuning-v2.batch-size``) through the frozen backbone with the prefixes in every
self-attention, and upload both. Server: example-weighted FedAvg (the base
:meth:`aggregate`), as FedPrompt. Bytes per client-round, each way:
``2·(4·L·T·D + 128)`` (L=6, T=8, D=384: 147,712 B).
"""

from __future__ import annotations

from fedtext.server.strategy import FedTextStrategy


class FedPTuningV2(FedTextStrategy):
    """FedAvg (example-weighted, the base :meth:`aggregate`) of the prefixes."""
