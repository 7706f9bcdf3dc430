"""FedDLS's run-config keys (``[tool.flwr.app.config.feddls]``), validated once; imports no
torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from fedtext.common.config import ConfigError, MethodConfig, check_choice, check_range
from fedtext.common.metrics import MetricSpec

COMPRESSIONS = ("lasso", "full", "pca", "quant")


@dataclass(frozen=True)
class FedDLSConfig(MethodConfig):
    """``feddls.*``: local search (Alg. 3) and download compression (Alg. 2, App. E)."""

    name: ClassVar[str] = "feddls"
    model: ClassVar[str] = "fedtext.methods.feddls.model:FedDLSModel"
    strategy: ClassVar[str] = "strategies.feddls:FedDLS"
    client: ClassVar[str] = "clients.feddls:FedDLSClient"
    server_aggregation: ClassVar[str] = "a mean of discrete-token prompts sent as compressed updates"  # eqs. 5, 8-11
    privacy_reason: ClassVar[str] = ("feddls uploads discrete token ids that its server votes on per position; noise or a "
                                     "masked sum of token ids is no prompt (a histogram-sum departure is not built)")
    local_training: ClassVar[str] = "a discrete token search (no gradients)"
    summary: ClassVar[str] = "discrete token search; 16-bit ids up, LASSO down"
    page: ClassVar[str] = "feddls"
    results: ClassVar[str] = "feddpg_table1_ag_news"
    description: ClassVar[str] = (
        "FedDLS: discrete local search (Alg. 3): `feddls.steps` times, the client picks a prompt position and "
        "tries the `feddls.candidates` (K) nearest vocabulary tokens by cosine (eq. 7), keeping the best if it "
        "lowers the loss (eq. 6); the server rebuilds each client's prompt from the token ids, averages in "
        "embedding space (eq. 5) and compresses the change for download: LASSO + least squares onto Φ vocabulary "
        "embeddings per position (eqs. 8–11, `feddls.compression=lasso`), or `full` / `pca` / `quant` (App. E).")
    travels: ClassVar[str] = (
        "up: one uint16 token id (or the \"unchanged\" sentinel `65535`) per position, `2T + 128` B; down "
        "(`lasso`): Φ uint16 ids + Φ float16 weights per position, `4ΦT + 256` B; `full`: `2TD + 128` B; round 1 "
        "downloads nothing (p′₀ comes from the seed)")
    smoke: ClassVar[Mapping[str, object]] = {"steps": 1, "candidates": 2}
    # the p' version the client holds after the round (clients.feddls.FedDLSClient.train): the
    # server sends its next download from there (strategies.feddls.FedDLS.download)
    fit_metrics: ClassVar[tuple[MetricSpec, ...]] = (MetricSpec("dls_version", whole=True, low=0),)
    evaluate_metrics: ClassVar[tuple[MetricSpec, ...]] = ()  # the evaluate telemetry only

    #: K nearest vocabulary tokens tried per local-search step (eq. 7); the paper's T=50 is `prompt-length=50`
    candidates: int = 5  # K: nearest vocabulary tokens tried per local-search step (eq. 7)
    steps: int = 40  # S: local-search steps per client per round (Alg. 3)
    #: download: `lasso` (eqs. 8–11), `full` (float16 p, T × D), `pca`, `quant` (App. E)
    compression: str = "lasso"  # download: lasso (eqs. 8-11) | full (float16 T x D) | pca | quant (App. E)
    #: `lasso`: Φ tokens (vocabulary embeddings) per prompt position
    phi: int = 5  # Phi: vocabulary embeddings per prompt position in the lasso download
    #: `lasso`: α of eq. (8) (scikit-learn's `alpha = α / (2D)`)
    lasso_alpha: float = 0.2  # alpha of eq. (8) (scikit-learn's alpha = alpha / (2 D))
    #: `lasso`: L of Alg. 2's first LASSO pass, its first-pass L (Alg. 2 keeps L = [`lasso-screen`, `phi`])
    lasso_screen: int = 100  # L of the first LASSO pass (Alg. 2 keeps L = [lasso-screen, phi])
    #: `pca`: n of App. E's PCA download, the top-n principal components of e(V)
    pca_components: int = 10  # n of App. E's PCA download (top-n principal components of e(V))
    #: `quant`: b of App. E's quantized download, b bits per value + a float16 scale per token
    quant_bits: int = 3  # b of App. E's quantized download (b bits per value + a scale per token)

    def __post_init__(self) -> None:
        for f in ("candidates", "steps", "phi", "lasso_screen", "pca_components"):
            check_range(self.key(f), getattr(self, f), 1)
        check_range(self.key("lasso_alpha"), self.lasso_alpha, 0)
        check_range(self.key("quant_bits"), self.quant_bits, 2, 8)
        check_choice(self.key("compression"), self.compression, COMPRESSIONS)
        if self.lasso_screen < self.phi:
            raise ConfigError(
                f"{self.key('lasso_screen')} ({self.lasso_screen}) must be >= {self.key('phi')} ({self.phi}): "
                "Alg. 2 keeps L = [screen, phi]"
            )
