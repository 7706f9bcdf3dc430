"""FedLoRA: LoRA (Hu et al., ICLR 2022) on the frozen encoder, FedAvg of each factor; with
``fedlora.freeze-a``, FFA-LoRA (Sun et al., ICLR 2024). Config and model:
:mod:`fedtext.methods.fedlora`.

Client must: load the downloaded ``lora_A`` / ``lora_B`` (and ``head.*``) into the PEFT LoRA
layers of its own copy of the encoder, take ``fedlora.local-steps`` AdamW steps of
``fedlora.batch-size`` shots (``fedlora.lr`` for the factors, ``fedlora.head-lr`` for the
head) and upload them. A never travels with ``freeze-a``: both sides rebuild it from the run
seed.

Server: the example-weighted mean of A and of B separately (the base :meth:`aggregate`), as
FederatedScope-LLM and FlowerTune average LoRA. ``mean(B) mean(A) != mean(B A)``: the global
update is not the mean of the clients' updates once their A differ; with ``freeze-a`` every A
is the seeded one and the mean is exact. Bytes per client-round, each way:
``4 r (d_in + d_out) L |targets| + 128 * 2 L |targets|`` (MiniLM-L6, r = 8, query + value:
297,984 B; 148,992 B with ``freeze-a``; a 2-class linear head adds 3,336 B).
"""

from __future__ import annotations

from fedtext.server.strategy import FedTextStrategy


class FedLoRA(FedTextStrategy):
    """Example-weighted FedAvg of each LoRA factor (the base :meth:`aggregate`).

    A class of its own although it adds nothing: the registry names one strategy per method,
    logs and records show its name, and a reader finds each method's server side at
    strategies/<method>.py."""
