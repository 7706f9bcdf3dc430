"""A method's model: the one object its strategy and its client both build.

It says, once for both sides:

* what the **global arrays** are (:meth:`Model.global_specs`, named) and their
  round-0 values (:meth:`Model.initial_arrays`);
* what a client **upload** must look like (:meth:`Model.upload_specs`, named, plus
  :meth:`Model.check_upload` for what specs cannot say, e.g. sigma > 0); the server
  decodes every upload once into a dict keyed by these names and drops anything else;
* how global arrays **classify** and how they are **evaluated**:
  :meth:`Model.evaluate` ``(arrays, batches) -> (loss, accuracy)`` is what the server
  runs on its test split and every client on its local one.

Three shapes cover the methods so far:

* :class:`PromptModel`: the global arrays stand for one soft prompt ``[T, D]`` in
  front of the frozen PLM (fedprompt, feddls; ``prompt`` says how);
* :class:`SubspaceModel`: the prompt is ``p0 + A z`` (bbt-fed, fedbpt; BBT, eq. (12) of
  FedDLS), p0 and A rebuilt from the seed on both sides;
* :class:`NetworkModel`: the global arrays are trained weights of the encoder and
  of the ``linear`` head (fedavg; FeS and FedDRS train parts of it too). Each model
  object works on its own :meth:`fedtext.backbone.Backbone.trainable_copy`, so two
  clients in one process never see each other's weights.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from fedtext.backbone import INJECTIONS, Backbone, EncodedBatch, trainable_predicate
from fedtext.common.comm import ArraySpec
from fedtext.backbone.prompts import Prompts, bbt_space, project

if TYPE_CHECKING:
    from fedtext.common.config import MethodConfig, RunConfig


class Model:
    """Base: global arrays, upload format and evaluation of one method.

    Parameters
    ----------
    cfg
        The validated run configuration (``cfg.method_config`` is the method's own).
    backbone
        The process's frozen backbone.
    """

    # Whether the inserted positions start as the embeddings of natural vocabulary tokens (so
    # ``prompt-length`` must not exceed them: fedtext.server_app.check_prompt_fits)
    natural_prompt: ClassVar[bool] = False

    def __init__(self, cfg: "RunConfig", backbone: Backbone) -> None:
        self.cfg = cfg
        self.mcfg: "MethodConfig" = cfg.method_config
        self.backbone = backbone

    @classmethod
    def inserted_positions(cls, cfg: "RunConfig") -> tuple[str, int]:
        """The positions this method's model inserts after ``[CLS]`` in every sequence, and the
        run-config key that sets their number (none: ``("", 0)``); the config check counts them
        against the encoder's positions before anything is built."""
        return "", 0

    def global_specs(self) -> list[ArraySpec]:
        """Named specs of the global arrays (what a plain download carries)."""
        raise NotImplementedError

    def upload_specs(self) -> list[ArraySpec]:
        """Named specs of a client upload; default: the global arrays' specs."""
        return self.global_specs()

    def initial_arrays(self) -> list[np.ndarray]:
        """The global arrays at round 0."""
        raise NotImplementedError

    def check_upload(self, upload: dict[str, np.ndarray]) -> str | None:
        """Why a (spec-conforming) upload is invalid, or ``None``."""
        return None

    def update(self, sent: Sequence[np.ndarray], upload: Sequence[np.ndarray]) -> list[np.ndarray]:
        """A client's contribution as one vector, what differential privacy bounds and noises
        (:mod:`fedtext.trust.privacy`): ``Δ = upload − sent``, the upload minus the global arrays
        the client was sent (for every method whose upload and global arrays are the same arrays)."""
        return [np.asarray(u, dtype=np.float64) - np.asarray(s, dtype=np.float64) for s, u in zip(sent, upload, strict=True)]

    def apply_update(self, sent: Sequence[np.ndarray], update: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The upload that carries ``update`` (inverse of :meth:`update`): ``sent + Δ``, in the
        upload's dtypes."""
        return [(np.asarray(s, dtype=np.float64) + d).astype(np.asarray(s).dtype) for s, d in zip(sent, update, strict=True)]

    def check_scale(self, upload: dict[str, np.ndarray], reference: dict[str, np.ndarray],
                    bound: float) -> str | None:
        """Why an upload's magnitudes cannot be an honest client's, or ``None``.

        Finite poison passes every spec (a fedprompt prompt of 1e30 made the global
        loss NaN, and every later honest upload was dropped against it), so each float
        array that shares its name with a global array must satisfy

            max |x| <= bound * max(1, max |global array of that name|)

        (``upload-bound``; 0: no bound). Relative to the global array, so one key fits
        prompts (|x| ~ 0.1-1: limit 100), pretrained weights (MiniLM's largest |w| ~ 10-20)
        and z; the ``max(1, .)`` keeps a zero-initialised array (z_0 = 0, a zero bias)
        from allowing nothing. A method whose upload arrays are named otherwise overrides
        this (FedBPT's packed ``z|sigmas|loss``).
        """
        if not bound:
            return None
        for name, x in upload.items():
            ref = reference.get(name)
            if ref is None or x.dtype.kind != "f" or not x.size:
                continue
            reason = over_bound(name, x, ref, bound)
            if reason:
                return reason
        return None

    def trainable_parameters(self) -> int:
        """How many numbers a client optimises (the compare tables' "trainable params");
        default: the size of the global arrays."""
        return int(sum(np.prod(s.shape) for s in self.global_specs()))

    def evaluate(self, arrays: Sequence[np.ndarray], batches: Sequence[EncodedBatch]) -> tuple[float, float]:
        """(mean cross-entropy, accuracy) of the classifier ``arrays`` stand for."""
        raise NotImplementedError


class PromptModel(Model):
    """One soft prompt ``[T, D]`` in front of the frozen PLM; arrays -> :meth:`prompt`."""

    natural_prompt: ClassVar[bool] = True

    @classmethod
    def inserted_positions(cls, cfg: "RunConfig") -> tuple[str, int]:
        return "prompt-length", cfg.prompt_length

    def prompt(self, arrays: Sequence[np.ndarray]) -> np.ndarray:
        """The ``[T, D]`` prompt the global arrays stand for; default: the first array."""
        return np.asarray(arrays[0], dtype=np.float32)

    def global_specs(self) -> list[ArraySpec]:
        return [ArraySpec("prompt", (self.cfg.prompt_length, self.backbone.dim), "float32")]

    def initial_arrays(self) -> list[np.ndarray]:
        """p0: embeddings of T natural tokens drawn with the run seed (as BBT)."""
        return [self.backbone.initial_prompt(self.cfg.prompt_length, self.cfg.seed)]

    def evaluate(self, arrays: Sequence[np.ndarray], batches: Sequence[EncodedBatch]) -> tuple[float, float]:
        return self.backbone.evaluate(self.prompt(arrays), batches)


class SubspaceModel(PromptModel):
    """``p = p0 + A z`` (BBT); z is the first ``intrinsic-dim`` values of the first array.

    p0 and A come from :func:`fedtext.backbone.prompts.bbt_space`, rebuilt from the run seed
    identically by server and clients; neither is ever sent.
    """

    def __init__(self, cfg: "RunConfig", backbone: Backbone) -> None:
        super().__init__(cfg, backbone)
        self.d = self.mcfg.intrinsic_dim
        self.p0, self.A = bbt_space(backbone, cfg.prompt_length, self.d, cfg.seed, self.mcfg.sigma0)
        if cfg.prompt_injection in INJECTIONS:
            backbone.injection(cfg.prompt_injection)  # one clear error now for an encoder without its place

    def project(self, z: np.ndarray) -> Prompts:
        """``p0 + A z`` for one z ``[d]`` or a population ``[P, d]``, entering where the run's
        ``prompt-injection`` says (:func:`fedtext.backbone.prompts.project`)."""
        return project(self.p0, self.A, z, self.cfg.prompt_injection)

    def prompt(self, arrays: Sequence[np.ndarray]) -> Prompts:
        return self.project(np.asarray(arrays[0], dtype=np.float32)[: self.d])

    def trainable_parameters(self) -> int:
        """d: the CMA-ES optimises z (sigma and C are its search state, not parameters)."""
        return self.d


class NetworkModel(Model):
    """Trained encoder weights and/or the ``linear`` head are the global arrays.

    Subclasses say which weights train (:meth:`trainable`, a predicate on weight
    names as :meth:`fedtext.backbone.Backbone.named_parameters` gives them); the
    global arrays are those weights in that order, named by them, float32. The
    ``linear`` head starts from a seeded ``N(0, 0.02^2)`` weight and zero bias (BERT's
    initialiser), the encoder from the pretrained weights.
    """

    HEAD_INIT_STD = 0.02

    def __init__(self, cfg: "RunConfig", backbone: Backbone) -> None:
        super().__init__(cfg, backbone)
        self._network: Backbone | None = None

    def trainable(self) -> str | Callable[[str], bool]:
        """Which weights train and travel: ``"all"``, ``"none"`` or a name predicate."""
        return "all"

    def trainable_parameters(self) -> int:
        """The weights :meth:`trainable` names (counted without making the copy)."""
        wants = trainable_predicate(self.trainable())
        return sum(p.numel() for n, p in self.backbone.named_parameters() if wants(n))

    @property
    def network(self) -> Backbone:
        """This model's own trainable copy of the backbone (made on first use)."""
        if self._network is None:
            self._network = self.backbone.trainable_copy(self.trainable())
        return self._network

    def global_specs(self) -> list[ArraySpec]:
        return [ArraySpec(name, tuple(p.shape), "float32") for name, p in self.network.named_trainable()]

    def initial_arrays(self) -> list[np.ndarray]:
        arrays = self.network.trainable_arrays()
        heads = self.head_init()
        return [heads.get(name, a) for (name, _), a in zip(self.network.named_trainable(), arrays, strict=True)]

    def head_init(self) -> dict[str, np.ndarray]:
        """The ``linear`` head's round-0 weights by name (``head.weight`` seeded
        ``N(0, 0.02^2)``, ``head.bias`` zero), or nothing for a run without one."""
        shapes = {n: tuple(p.shape) for n, p in self.backbone.named_parameters() if n.startswith("head.")}
        rng = np.random.default_rng([self.cfg.seed, 0x11EAD])
        out: dict[str, np.ndarray] = {}
        if "head.weight" in shapes:
            out["head.weight"] = (self.HEAD_INIT_STD * rng.standard_normal(shapes["head.weight"])).astype(np.float32)
        if "head.bias" in shapes:
            out["head.bias"] = np.zeros(shapes["head.bias"], dtype=np.float32)
        return out

    def load(self, arrays: Sequence[np.ndarray]) -> Backbone:
        """The trainable copy with ``arrays`` loaded into it."""
        self.network.load_trainable(arrays)
        return self.network

    def evaluate(self, arrays: Sequence[np.ndarray], batches: Sequence[EncodedBatch]) -> tuple[float, float]:
        with self.load(arrays).fixed_weights() as net:
            return net.evaluate(None, batches)


def over_bound(name: str, x: np.ndarray, ref: np.ndarray, bound: float) -> str | None:
    """``upload-bound``'s test of one array against the global array ``ref`` (see
    :meth:`Model.check_scale`): the reason, or ``None``."""
    scale = max(1.0, float(np.abs(ref).max())) if ref.size else 1.0
    largest = float(np.abs(x).max())
    if largest > bound * scale:
        return f"{name}: |value| {largest:.3g} exceeds upload-bound {bound:g} x {scale:.3g} (its global scale)"
    return None
