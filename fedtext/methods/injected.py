"""What the two injected-module methods (fedlora, fedadapter) share: small trainable modules
added to the model's own copy of the frozen encoder.

LoRA (Hu et al. 2022) and bottleneck adapters (Houlsby et al. 2019) leave every pretrained
weight frozen and add a few new ones inside each transformer layer; only the new ones (and
the ``linear`` head, and for adapters the layers' LayerNorms) train and travel. Here:

* the model's network is :meth:`fedtext.backbone.Backbone.trainable_copy` of the process's
  frozen backbone, whose pretrained weights stay *shared by reference* (no second copy of
  what nobody trains) while its modules are its own; the new modules are injected into that
  copy's encoder only (:meth:`InjectedModel.inject`), so the process-wide backbone, which a
  Ray actor shares between every client it hosts, is never modified, and two clients in one
  process never see each other's new weights;
* the new weights start from a seeded initialisation (:meth:`InjectedModel.initial_value`,
  a numpy generator per tensor, seeded by the run seed): identical on every client and the
  server, whatever torch's global generator holds. The half of each module that multiplies
  last starts at zero (LoRA's B, the adapter's W_up), so the round-0 model *is* the frozen
  model, bit for bit;
* the global arrays are the trainable weights in :meth:`Backbone.named_trainable` order, each
  named as in the encoder (``encoder.layer.0.attention.self.query.lora_B.default.weight``),
  then ``head.weight`` / ``head.bias`` of a ``linear`` head: what :class:`NetworkModel`
  already does for fedavg, so uploads are decoded and checked by the shared code
  (:class:`fedtext.server.validation.UploadValidator`: shape and dtype per :class:`ArraySpec`,
  finite, ``upload-bound``) exactly as fedavg's are.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from fedtext.backbone import Backbone
from fedtext.common.config import ConfigError
from fedtext.learning.model import NetworkModel


class InjectedModel(NetworkModel):
    """A :class:`NetworkModel` whose trained weights are modules injected into its own copy.

    Subclasses say which new modules go where (:meth:`inject`), which new weights train
    (:meth:`is_injected`), which *existing* weights of the copy train beside them
    (:meth:`is_copied`: the head, the adapters' LayerNorms) and how each new weight starts
    (:meth:`initial_value`).
    """

    SEED_SALT = 0x1A7EC7  # the run seed's stream for the injected weights' initialisation

    # -------------------------------------------------------------- the method's part
    def inject(self, network: Backbone) -> None:
        """Add the method's modules to ``network.encoder`` (the model's own copy)."""
        raise NotImplementedError

    def is_injected(self, name: str) -> bool:
        """Whether weight ``name`` (as :meth:`Backbone.named_parameters` gives it) is a new
        weight that trains and travels."""
        raise NotImplementedError

    def is_new(self, name: str) -> bool:
        """Whether weight ``name`` is one :meth:`inject` added (trained or not: FFA-LoRA's
        frozen A is new but does not train); default: :meth:`is_injected`."""
        return self.is_injected(name)

    def initial_value(self, name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        """The seeded round-0 value of new weight ``name``."""
        raise NotImplementedError

    def is_copied(self, name: str) -> bool:
        """Whether pretrained (or head) weight ``name`` trains beside the new ones; default:
        the ``linear`` head's ``head.weight`` / ``head.bias`` only."""
        return name.startswith("head.")

    # ------------------------------------------------------------------ the shared part
    def trainable(self) -> Callable[[str], bool]:
        return lambda name: self.is_copied(name) or self.is_injected(name)

    @property
    def network(self) -> Backbone:
        """This model's own copy of the backbone with the method's modules in it (made on
        first use): the pretrained weights shared with the process's frozen backbone, the
        ones :meth:`is_copied` names deep-copied, the new ones seeded (:meth:`initial_value`)."""
        if self._network is None:
            net = self.backbone.trainable_copy(self.is_copied)
            self.inject(net)
            # new torch modules start in train mode (PEFT's LoRA dropout): put them in the copied
            # encoder's eval mode, so that every evaluation before local training is deterministic
            # (a client's train() switches the whole encoder to train mode and back)
            (net.mlm or net.encoder).eval()
            self._seed(net)
            net.set_trainable(self.trainable())
            self._network = net
        return self._network

    def _seed(self, net: Backbone) -> None:
        """Overwrite every new weight with its seeded value, one generator per tensor
        (``[seed, SEED_SALT, i]``: the i-th new tensor in name order), so that the values do
        not depend on torch's global generator nor on which other tensors exist."""
        new = [(n, p) for n, p in net.named_parameters() if self.is_new(n)]
        if not new:
            raise ConfigError(f"{self.cfg.method}: no module of {self.backbone.name} took the method's weights")
        with torch.no_grad():
            for i, (name, p) in enumerate(new):
                rng = np.random.default_rng([self.cfg.seed, self.SEED_SALT, i])
                value = self.initial_value(name, tuple(p.shape), rng)
                p.copy_(torch.as_tensor(np.asarray(value, dtype=np.float32)))

    def trainable_parameters(self) -> int:
        """The numbers a client optimises: the new weights that train, plus the head (and
        LayerNorms) :meth:`is_copied` names; counted on the model's own copy, since the new
        weights do not exist in the frozen backbone."""
        return sum(p.numel() for _, p in self.network.named_trainable())

    def layers(self) -> int:
        """Transformer layers of the encoder (6 for all-MiniLM-L6-v2)."""
        return int(self.backbone.encoder.config.num_hidden_layers)
