"""Where the encoder runs and in which dtype: the ``device`` and ``precision`` keys.

``precision`` is the *compute* dtype of the encoder's forward passes, applied with
``torch.autocast`` (:meth:`Precision.autocast`) around every encoder call; the weights
stay float32, and so do trained weights, optimizer and CMA-ES state and every array a
client or the server sends (logits come back as float32 before any loss). So ``bf16``
changes speed and the last bits of a score, never the bytes on the wire.

Why autocast and not bf16 weights: the back-prop methods train the encoder's weights
(fedavg, feddrs, FeS) or back-propagate through it (fedprompt, feddpg, P-tuning v2), and
their trained weights and optimizer state must stay float32; one mechanism serves every
method. On this CPU (2 cores, avx512_bf16) autocast ran MiniLM 1.81x faster than fp32 and
bf16 weights 1.88x (a probe of 256 SST-2 sentences, batch 32): the difference does not pay for a second path.

Checked once, when the backbone loads (:func:`resolve_device`, :func:`check_precision`):
``device=cuda`` without a CUDA GPU, ``precision=fp16`` on a CPU, ``bf16`` on a CPU without
bf16 instructions or a GPU without bf16 support: each a one-line :class:`ConfigError`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from fedtext.common.errors import ConfigError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(name: str) -> torch.device:
    """The torch device a ``device`` value names (``auto``: CUDA when torch sees a GPU).

    Raises
    ------
    ConfigError
        ``cuda`` / ``cuda:N`` where torch sees no such GPU.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device={name}: torch sees no CUDA GPU (torch.cuda.is_available() is False; "
                              f"torch {torch.__version__}); use device=cpu or auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device={name}: torch sees {torch.cuda.device_count()} CUDA GPU(s) (cuda:0..)")
    return device


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX-512 BF16 or AMX); without it torch
    emulates bf16 at a fraction of fp32's speed."""
    cpu = getattr(torch, "cpu", None)
    return any(bool(getattr(cpu, probe, lambda: False)()) for probe in
               ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))


def check_precision(device: torch.device, precision: str) -> None:
    """A one-line :class:`ConfigError` where ``device`` cannot compute in ``precision``."""
    if precision == "fp16" and device.type != "cuda":
        raise ConfigError("precision=fp16 needs a CUDA GPU (device=cuda); on a CPU use precision=bf16")
    if precision == "bf16" and device.type == "cpu" and not cpu_has_bf16():
        raise ConfigError("precision=bf16: this CPU has no bf16 instructions (AVX-512 BF16 or AMX); use fp32")
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"precision=bf16: {torch.cuda.get_device_name(device)} does not support bf16; use fp16")


@dataclass(frozen=True)
class Precision:
    """The device and compute dtype of one backbone (shared by its trainable copies)."""

    device: torch.device
    name: str = "fp32"

    @classmethod
    @functools.lru_cache(maxsize=None)
    def of(cls, device: str, precision: str) -> "Precision":
        """Resolve and check a run's ``device`` and ``precision`` (one-line errors), once per
        pair: ``get_backbone`` asks at every client build (a failed check raises, and is
        not cached)."""
        resolved = resolve_device(device)
        check_precision(resolved, precision)
        return cls(resolved, precision)

    @property
    def dtype(self) -> torch.dtype:
        """The compute dtype (``torch.bfloat16`` for ``bf16``)."""
        return DTYPES[self.name]

    def place(self, *modules: torch.nn.Module | None) -> None:
        """Move ``modules`` (``None`` skipped) to the device, in place: where a backbone's
        weights go when it loads (nothing to do on a CPU, where they were loaded)."""
        if self.device.type == "cpu":
            return
        for module in modules:
            if module is not None:
                module.to(self.device)

    def loss_scaler(self) -> torch.amp.GradScaler:
        """Loss scaling for the back-prop methods (one per optimizer, kept across its steps).

        Enabled for ``fp16`` only: float16 gradients below ~6e-8 flush to zero, so the loss
        is multiplied by a scale S (65,536 at first) before ``backward`` and the gradients
        divided by S before the step; a step whose gradients overflowed (inf/NaN) is
        skipped and S halved, and S doubles after 2,000 clean steps (``GradScaler``'s
        defaults). bf16 has float32's exponent range and fp32 needs none: disabled, the
        scaler passes the loss through and steps the optimizer as is (:func:`backward_step`).
        """
        return torch.amp.GradScaler(self.device.type, enabled=self.name == "fp16")

    def peak_memory_mb(self) -> float | None:
        """Peak GPU memory torch allocated on this device since the process started, in MiB
        (``torch.cuda.max_memory_allocated``; what the encoder, trainable copies and
        activations held, not the CUDA context); None on a CPU, where the RSS is the figure."""
        if self.device.type != "cuda":
            return None
        return torch.cuda.max_memory_allocated(self.device) / 2**20

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """The encoder's forward passes in the compute dtype (nothing for fp32, so that
        the fp32 path is exactly the code the golden records were made with)."""
        if self.name == "fp32":
            yield
            return
        with torch.autocast(device_type=self.device.type, dtype=self.dtype):
            yield


CPU_FP32 = Precision(torch.device("cpu"))


def backward_step(loss: torch.Tensor, opt: torch.optim.Optimizer, scaler: torch.amp.GradScaler) -> None:
    """One optimizer step on ``loss``: zero the gradients, back-propagate ``scaler.scale(loss)``
    and step through ``scaler`` (unscaled gradients; skipped where they overflowed).
    With a disabled scaler (fp32, bf16) this is ``loss.backward(); opt.step()``."""
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()


def accumulated_step(losses: Sequence[Callable[[], torch.Tensor]], opt: torch.optim.Optimizer,
                     scaler: torch.amp.GradScaler) -> float:
    """One optimizer step on the sum of ``losses``, each built and back-propagated on its own
    (gradients accumulate: the gradient of a sum is the sum of the gradients), so that one
    term's graph is in memory at a time; as :func:`backward_step` otherwise (the same scale on
    every term, one step through ``scaler``). Returns the summed loss."""
    opt.zero_grad()
    total = 0.0
    for loss in losses:
        value = loss()
        scaler.scale(value).backward()
        total += float(value.detach())
    scaler.step(opt)
    scaler.update()
    return total
