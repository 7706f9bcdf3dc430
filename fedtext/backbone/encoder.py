"""The encoder network: its weights (which train, trainable copies), its forward with the
prompt inserted and injections added, and the label vectors it encodes.

Weights. One frozen :class:`Network` per process backbone (a Ray actor hosts many
simulated clients, so it must never change). A method that trains weights asks for
:meth:`Network.trainable_copy`: a network whose trainable tensors are its own deep copies
while the frozen ones stay shared with the process's (no second copy of what nobody
trains). Whatever a client trains lives in its copy and is visible to no other client.

Label vectors. The similarity head's label vectors are encoded by the plain encoder itself
(never under a method's hooks, :func:`suspended_hooks`), so a network that trains
recomputes them at every forward, and one whose weights changed otherwise
(:meth:`Network.load_trainable`, :meth:`Network.weights_changed`) recomputes them once.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from fedtext.backbone.injections import injection
from fedtext.backbone.tokens import EncodedBatch
from fedtext.backbone.devices import Precision
from fedtext.backbone.heads import mean_pool

if TYPE_CHECKING:
    from transformers import PreTrainedModel

Trainable = str | Callable[[str], bool]  # "none", "all" or a predicate on weight names


@contextlib.contextmanager
def suspended_hooks(module: torch.nn.Module) -> Iterator[None]:
    """While open, ``module`` and every submodule run without their forward hooks and
    forward pre-hooks (a method's prompts or probes); they are all back afterwards, in
    their order, even if the block raises (a hook registered inside the block is dropped
    with it). The hook dicts are swapped, not emptied, so the callers' handles stay valid."""
    saved = [(m, m._forward_hooks, m._forward_pre_hooks) for m in module.modules()]
    try:
        for m, hooks, pre in saved:
            m._forward_hooks, m._forward_pre_hooks = type(hooks)(), type(pre)()
        yield
    finally:
        for m, hooks, pre in saved:
            m._forward_hooks, m._forward_pre_hooks = hooks, pre


def trainable_predicate(trainable: Trainable) -> Callable[[str], bool]:
    """``"none"`` / ``"all"`` / a predicate on weight names -> a predicate."""
    if callable(trainable):
        return trainable
    if trainable in ("none", "all"):
        return lambda _name: trainable == "all"
    raise ValueError(f"trainable must be 'none', 'all' or a predicate, got {trainable!r}")


class QueryCounter:
    """Sequences pushed through an encoder (shared by a network and its trainable copies)."""

    def __init__(self) -> None:
        self.n = 0


class Network:
    """An encoder (or the masked-LM model around it), the ``linear`` head's layer, and which
    of their weights train.

    Parameters
    ----------
    mlm, encoder
        The masked-LM model around the encoder (head ``mlm``) or ``None``, and the encoder.
    num_classes
        C of a head with a trainable ``Linear(D, C)`` (:attr:`fedtext.backbone.heads.Head.has_linear`),
        else 0: no layer.
    precision
        Device and compute dtype: the weights are placed on its device
        (:meth:`fedtext.backbone.devices.Precision.place`), encoder calls run under its autocast.
    model
        The model's name, for error messages.
    """

    def __init__(self, mlm: PreTrainedModel | None, encoder: PreTrainedModel, num_classes: int,
                 precision: Precision, model: str) -> None:
        self.mlm, self.encoder = mlm, encoder
        self.precision = precision
        self.model = model
        self.counter = QueryCounter()  # shared with trainable copies
        self.encoder.eval()
        if self.mlm is not None:
            self.mlm.eval()
        self.embeddings = self.encoder.get_input_embeddings()  # e(.): [V, D]
        self.dim = int(self.embeddings.weight.shape[1])
        # Placeholder weights: a method that uses this head loads its own (seeded) ones.
        self.linear = torch.nn.Linear(self.dim, num_classes) if num_classes else None
        if self.linear is not None:
            torch.nn.init.zeros_(self.linear.weight)
            torch.nn.init.zeros_(self.linear.bias)
        precision.place(self.mlm or self.encoder, self.linear)  # trainable copies deep-copy these: they stay there
        self.training = False
        self.label_cache: Tensor | None = None

    @property
    def device(self) -> torch.device:
        """Where the weights live."""
        return self.precision.device

    # ------------------------------------------------------------------ weights
    def named_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        """Every weight by name: the encoder's (or MLM's), then ``head.weight``/``head.bias``
        of the ``linear`` or ``cls`` head."""
        named = list((self.mlm or self.encoder).named_parameters())
        if self.linear is not None:
            named += [(f"head.{n}", p) for n, p in self.linear.named_parameters()]
        return named

    def set_trainable(self, trainable: Trainable) -> None:
        """Choose which weights train: ``"none"`` (frozen), ``"all"`` or a predicate on
        parameter names. Frozen weights never get gradients, so back-propagation stores
        nothing for them."""
        wants = trainable_predicate(trainable)
        for name, p in self.named_parameters():
            p.requires_grad_(bool(wants(name)))
        self.training = any(p.requires_grad for _, p in self.named_parameters())

    def named_trainable(self) -> list[tuple[str, torch.nn.Parameter]]:
        """``(name, weight)`` of the trainable weights, in a fixed order (the wire order)."""
        return [(n, p) for n, p in self.named_parameters() if p.requires_grad]

    def trainable_copy(self, trainable: Trainable) -> "Network":
        """A network that trains the weights ``trainable`` names, on its own copies; the
        others are shared with ``self`` by reference, and so is the query counter."""
        wants = trainable_predicate(trainable)
        root = self.mlm or self.encoder
        memo = {id(p): p for n, p in root.named_parameters() if not wants(n)}
        new = copy.copy(self)
        new_root = copy.deepcopy(root, memo)
        if self.mlm is not None:
            new.mlm, new.encoder = new_root, new_root.base_model
        else:
            new.encoder = new_root
        new.embeddings = new.encoder.get_input_embeddings()
        new.linear = copy.deepcopy(self.linear)
        new.label_cache = None
        new.set_trainable(wants)
        return new

    def trainable_arrays(self) -> list[np.ndarray]:
        """The trainable weights as float32 arrays, in :meth:`named_trainable` order."""
        return [p.detach().cpu().numpy().astype(np.float32, copy=True) for _, p in self.named_trainable()]

    def load_trainable(self, arrays: Sequence[np.ndarray]) -> None:
        """Overwrite the trainable weights (in :meth:`named_trainable` order) with ``arrays``."""
        named = self.named_trainable()
        if len(arrays) != len(named):
            raise ValueError(f"expected {len(named)} trainable arrays, got {len(arrays)}")
        with torch.no_grad():
            for (name, p), a in zip(named, arrays, strict=True):
                if tuple(a.shape) != tuple(p.shape):
                    raise ValueError(f"{name}: shape {tuple(a.shape)}, expected {tuple(p.shape)}")
                p.copy_(torch.as_tensor(np.require(a, requirements="W"), dtype=p.dtype))  # W: the server's uploads are read-only views (comm.view), which torch warns on
        self.weights_changed()

    def weights_changed(self) -> None:
        """The encoder's weights changed in place: what was computed from them (the label
        vectors) is computed again at its next use."""
        self.label_cache = None

    @contextlib.contextmanager
    def fixed_weights(self) -> Iterator[None]:
        """No gradients, and the label vectors encoded once for the whole block instead of at
        every forward (the weights cannot change inside it)."""
        was = self.training
        with torch.no_grad():
            self.training, self.label_cache = False, None
            try:
                yield
            finally:
                self.training, self.label_cache = was, None

    # --------------------------------------------------------------- embeddings
    def token_embeddings(self, input_ids: Tensor) -> Tensor:
        """e(ids) ``[B, L, D]``, looked up on the device and returned on the CPU."""
        return self.embeddings(input_ids.to(self.device)).cpu()

    def vocab_embeddings(self) -> np.ndarray:
        """e(V): the input embedding matrix as float32 ``[V, D]``."""
        return self.embeddings.weight.detach().float().cpu().numpy()

    # ------------------------------------------------------------------ forward
    def hidden_states(self, prompts: Tensor | None, batch: EncodedBatch,
                      injected: Mapping[str, Tensor] | None = None) -> tuple[Tensor, Tensor, int]:
        """The encoder's last hidden states ``[P*B, T+L, D]`` (float32), the attention mask
        ``[P*B, T+L]`` and T, in one encoder call.

        ``prompts``: input embeddings of the prompt positions, ``[P, T, D]`` (each prompt
        for every input), ``[P, B, T, D]`` (a prompt per input) or ``None`` (no prompt,
        P = 1); ``injected``: injection name -> its values ``[P, ...]``, added while the
        encoder runs (:mod:`fedtext.backbone.injections`; BBT's offsets ``[P, T, D]`` under
        ``embedding-output``).
        """
        b, l = batch.input_ids.shape
        dev = self.device
        tok = self.embeddings(batch.input_ids.to(dev))  # [B, L, D]
        d = tok.shape[-1]
        if prompts is None:
            prompts = tok.new_zeros(1, b, 0, d)
        elif prompts.ndim == 3:
            prompts = prompts[:, None].expand(prompts.shape[0], b, *prompts.shape[1:])
        p, t = prompts.shape[0], prompts.shape[2]
        x = torch.cat(
            [
                tok[:, :1].expand(p, b, 1, d),
                prompts.to(dev, tok.dtype),
                tok[:, 1:].expand(p, b, l - 1, d),
            ],
            dim=2,
        ).reshape(p * b, t + l, d)
        att = torch.cat([torch.ones(b, t, dtype=batch.attention_mask.dtype), batch.attention_mask], dim=1)
        att = att.repeat(p, 1).to(dev)  # [P*B, T+L]
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.precision.autocast())  # the encoder in the compute dtype
            for name, values in (injected or {}).items():
                stack.enter_context(injection(name, self.encoder, self.model).added(values, b))
            hidden = self.encoder(inputs_embeds=x, attention_mask=att).last_hidden_state.float()
        self.counter.n += p * b
        return hidden, att, t

    def label_vectors(self, descriptions: Callable[[], EncodedBatch]) -> Tensor:
        """``u_c``: the unit-norm pooled encodings ``[C, D]`` of the label descriptions
        (``descriptions()`` encodes them).

        Encoded by this network's *plain* encoder: once for a frozen one (cached, without
        gradients; not inference_mode, fedprompt back-propagates through them), at every
        call for one that trains (gradients flow into the encoder through them). Never
        under a method's forward hooks: the first call usually comes from inside a method's
        forward (fedptuning-v2's prefix hooks overwrite positions 1..T of every attention's
        keys and values), and a label description encoded there would be cached with the
        prefix in it (cosine 0.32-0.43 to the plain vectors on AG News), so every hook of
        the encoder is suspended while they are encoded (:func:`suspended_hooks`).
        """
        if self.label_cache is not None and not self.training:
            return self.label_cache
        batch = descriptions()
        # Never an inference tensor (the first call may come from score()'s inference_mode):
        # a cached one could not be saved for a later backward (fedprompt, feddpg).
        with torch.inference_mode(False), torch.set_grad_enabled(self.training and torch.is_grad_enabled()), \
                suspended_hooks(self.encoder):
            att = batch.attention_mask.to(self.device)
            with self.precision.autocast():
                hidden = self.encoder(input_ids=batch.input_ids.to(self.device), attention_mask=att)
            vectors = torch.nn.functional.normalize(mean_pool(hidden.last_hidden_state.float(), att), dim=-1)
        if not self.training:
            self.label_cache = vectors
        return vectors
