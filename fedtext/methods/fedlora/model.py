"""FedLoRA's model: PEFT's LoRA layers in the model's own copy of the encoder."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from fedtext.backbone import Backbone
from fedtext.backbone.architectures import LINEAR_ROLES, architecture_of
from fedtext.common.config import ConfigError
from fedtext.methods.injected import InjectedModel

if TYPE_CHECKING:
    from fedtext.common.config import RunConfig


class LoRAModel(InjectedModel):
    """LoRA factors ``lora_A`` ``[r, d_in]`` and ``lora_B`` ``[d_out, r]`` of every targeted
    linear layer are the global arrays (only ``lora_B`` with ``fedlora.freeze-a``), then the
    ``linear`` head.

    Initialisation, the same on every client and the server (seeded by the run seed): A
    ``~ U(-1/sqrt(d_in), 1/sqrt(d_in))``, the distribution of PEFT's default
    (``kaiming_uniform_(a=sqrt(5))``: bound ``sqrt(6 / ((1 + 5) d_in))``), drawn with numpy;
    B = 0, so ``W x + (alpha/r) B A x = W x`` at round 0, exactly.

    Raises ``ConfigError`` (one line, at model build: before any training, on the server)
    when a ``target-modules`` name is no linear layer of the encoder's transformer layers.
    """

    def __init__(self, cfg: "RunConfig", backbone: Backbone) -> None:
        super().__init__(cfg, backbone)
        self.targets = self.target_names(backbone)

    def target_names(self, backbone: Backbone) -> list[str]:
        """Full names (in the encoder) of the linear layers LoRA wraps in every transformer
        layer, in the encoder's module order. An item of ``target-modules`` that is a role of
        :data:`fedtext.backbone.architectures.LINEAR_ROLES` names the layer's linear map of
        that role in the encoder's architecture (``query``: BERT's ``attention.self.query``,
        MPNet's ``attention.attn.q``); any other item a linear layer's own last name
        (``dense``: all three of BERT's, ``q``: MPNet's query). An item that names nothing is
        one ``ConfigError`` line listing what the layers have."""
        mc = self.mcfg
        arch = architecture_of(backbone.encoder, backbone.name, mc.key("target_modules"))
        # (full name, path inside its layer) of every linear layer inside a transformer layer
        linear = []
        for n, m in backbone.encoder.named_modules():
            i = arch.layer_index(n)
            if isinstance(m, torch.nn.Linear) and i is not None:
                linear.append((n, n.split(f"{arch.layers}.{i}.", 1)[1]))

        def wanted(target: str, path: str) -> bool:
            return path == arch.linear[target] if target in arch.linear else path.rsplit(".", 1)[-1] == target

        missing = [t for t in mc.targets if not any(wanted(t, path) for _, path in linear)]
        if missing:
            have = sorted({path.rsplit(".", 1)[-1] for _, path in linear})
            raise ConfigError(f"{mc.key('target_modules')} names '{missing[0]}', which is no linear layer of "
                              f"{backbone.name}'s transformer layers; they have: {', '.join(have)} "
                              f"(or a role: {', '.join(LINEAR_ROLES)})")
        return [n for n, path in linear if any(wanted(t, path) for t in mc.targets)]

    def inject(self, network: Backbone) -> None:
        """PEFT's LoRA layers around :meth:`target_names` in ``network.encoder`` (the copy's;
        for ``head=mlm`` the MLM model's ``base_model``, so its MLM head keeps its weights)."""
        from peft import LoraConfig, inject_adapter_in_model  # PEFT only where a LoRA model is built

        mc = self.mcfg
        config = LoraConfig(r=mc.rank, lora_alpha=mc.alpha, lora_dropout=mc.dropout, target_modules=self.targets,
                            bias="none")
        inject_adapter_in_model(config, network.encoder)

    def is_new(self, name: str) -> bool:
        return ".lora_A." in name or ".lora_B." in name

    def is_injected(self, name: str) -> bool:
        """B always; A unless ``freeze-a`` (FFA-LoRA: A stays at its seeded value)."""
        return ".lora_B." in name or (".lora_A." in name and not self.mcfg.freeze_a)

    def initial_value(self, name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        if ".lora_B." in name:
            return np.zeros(shape, np.float32)
        bound = 1.0 / np.sqrt(shape[1])  # A [r, d_in]
        return rng.uniform(-bound, bound, size=shape).astype(np.float32)

    def scaling(self) -> float:
        """PEFT's ``alpha / r``, which multiplies ``B A x``."""
        return self.mcfg.alpha / self.mcfg.rank
