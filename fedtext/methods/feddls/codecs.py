"""FedDLS wire formats: token-id upload (§4.2) and prompt download codecs (§4.3, App. E).

Upload. A client sends one ``uint16`` per prompt position: the vocabulary id of the
token its local search put there, or :data:`SENTINEL` where it changed nothing (§4.2).
T positions cost ``2 T`` bytes (T=50: 100 B = 0.8 Kbit, Table 1) plus one NPY header.

Download. The server averages the clients' prompts in embedding space (eq. 5) and
sends a compressed version p' that clients rebuild with the same function the server
uses, so both hold bit-identical p' (:meth:`Codec.decode` is the only way p' is made).

============  ============================================  ==========================
codec         what travels per round                        payload bytes
============  ============================================  ==========================
``lasso``     residual R^t = p^t - p'^t_{-1} as Phi token    ``4 Phi T`` (uint16 ids +
              ids + float16 weights per position             float16 weights)
              (eqs. 8-11, Alg. 2)
``full``      p itself in float16 (FullDownload)            ``2 T D``
``pca``       p projected on the top-n principal            ``2 T n``
              components of e(V) (App. E, eqs. 13-16)
``quant``     p quantized to b bits per value with one      ``ceil(T D b / 8) + 2 T``
              float16 scale per token (App. E, eqs. 17-18)
============  ============================================  ==========================

plus :data:`fedtext.common.comm.NPY_HEADER_BYTES` per array (2 arrays for lasso and quant,
1 for full and pca). ``lasso`` is incremental (each round's arrays are a residual on
top of the previous p'); the others are absolute.
"""

from __future__ import annotations

import functools
import hashlib
import warnings
from typing import Any, ClassVar, Protocol

import numpy as np

from fedtext.common.comm import ArraySpec
from fedtext.common.config import ConfigError

SENTINEL = 65535  # uint16 "position unchanged" (§4.2 uses |V|+1; any id >= |V| works)


# ------------------------------------------------------------------------- upload
def encode_upload(token_ids: np.ndarray) -> np.ndarray:
    """``[T]`` chosen ids (-1 = unchanged) -> the ``uint16`` upload (§4.2)."""
    ids = np.asarray(token_ids)
    if ids.size and ids.max() >= SENTINEL:
        raise ValueError(f"token id {ids.max()} does not fit below the uint16 sentinel {SENTINEL}")
    return np.where(ids < 0, SENTINEL, ids).astype(np.uint16)


def check_upload(ids: np.ndarray, allowed: np.ndarray) -> str | None:
    """Why an uploaded id array is invalid, or None.

    Every entry must be :data:`SENTINEL` or one of ``allowed`` (the natural-token ids
    the client's search draws from, all ``< |V|``).
    """
    changed = ids[ids != SENTINEL].astype(np.int64)
    bad = changed[~np.isin(changed, allowed)]
    if bad.size:
        return f"{bad.size} token ids outside the candidate vocabulary (e.g. {int(bad[0])})"
    return None


def rebuild_prompt(ids: np.ndarray, p_prev: np.ndarray, vocab: np.ndarray) -> np.ndarray:
    """A client's p_i from its upload: ``e(id)`` where it changed a position, else p'^t."""
    p = p_prev.copy()
    changed = ids != SENTINEL
    p[changed] = vocab[ids[changed].astype(np.int64)]
    return p


# ----------------------------------------------------------------------- download
class Codec:
    """A download codec: ``encode(p, p_prev) -> arrays`` and ``decode(arrays, p_prev) -> p'``."""

    name: ClassVar[str]
    incremental: ClassVar[bool] = False  # decode needs the previous p' (residual codecs)

    def specs(self, t: int, d: int) -> list[ArraySpec]:
        """Shapes and dtypes of one round's arrays (checked by clients and tests)."""
        raise NotImplementedError

    def encode(self, p: np.ndarray, p_prev: np.ndarray) -> list[np.ndarray]:
        raise NotImplementedError

    def decode(self, arrays: list[np.ndarray], p_prev: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    @property
    def num_arrays(self) -> int:
        return len(self.specs(1, 1))


class LassoCodec(Codec):
    """Embedding compression of §4.3 (Alg. 2): R^t ~ e(V)_I^T x with |I| = Phi.

    Per position t: R^t = p^t - p'^t_{-1}; starting from I = all of V, solve the LASSO of
    eq. (8) and keep the top L ids by |x*| (eq. 9), for L = [screen, Phi]; then least
    squares on the Phi kept embeddings (eq. 10). Sent: ids ``uint16 [T, Phi]`` and
    weights ``float16 [T, Phi]``; both sides rebuild p'^t = p'^t_{-1} + e(V)_I^T x (eq. 11)
    from the *float16* weights.

    scikit-learn's ``Lasso`` minimises ``(1 / (2 n)) ||y - X w||^2 + a ||w||_1`` with n
    the number of samples; eq. (8) is ``||X w - y||^2 + alpha ||w||_1`` with the D
    embedding dimensions as samples. Dividing eq. (8) by 2D gives the same minimiser
    with ``a = alpha / (2 D)``.

    Where LASSO leaves fewer than L non-zero weights (eq. 9's top-L is then not
    unique), ties among the zeros are broken by ``|<e(v), R^t - e(V)_I^T x*>|``, the
    correlation with what the LASSO left unexplained: the zero whose KKT condition is
    closest to binding, i.e. (to first order) the next token the LASSO path would admit
    as alpha decreases. Before 2026-11-25 they were broken by ``|<e(v), R^t>|``, which
    favours tokens parallel to the part of R^t already fitted and on real residuals missed
    a token the reconstruction needed in 3 of 48 positions (relative error 0.40-0.45
    instead of float16's 2e-4; ``tools/reference/feddls.py``, docs/papers/feddls.md).
    """

    name = "lasso"
    incremental = True

    def __init__(self, vocab: np.ndarray, phi: int, alpha: float, screen: int) -> None:
        self.vocab, self.phi, self.alpha, self.screen = vocab, phi, alpha, screen

    def specs(self, t: int, d: int) -> list[ArraySpec]:
        return [ArraySpec("ids", (t, self.phi), "uint16"), ArraySpec("weights", (t, self.phi), "float16")]

    def compress(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ids ``[Phi]``, least-squares weights ``[Phi]``) for one residual ``r [D]``."""
        from sklearn.linear_model import Lasso

        index = np.arange(len(self.vocab))
        for keep in (self.screen, self.phi):
            if keep >= len(index):  # nothing to select (a screen wider than the vocabulary)
                continue
            x_t = self.vocab[index].T.astype(np.float64)  # [D, |I|]
            lasso = Lasso(alpha=self.alpha / (2 * x_t.shape[0]), fit_intercept=False, max_iter=2000)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ConvergenceWarning on tiny residuals
                lasso.fit(x_t, r.astype(np.float64))
            tie = np.abs(x_t.T @ (r - x_t @ lasso.coef_))  # the zeros: correlation with the LASSO residual
            order = np.lexsort((-tie, -np.abs(lasso.coef_)))  # |x*| first, then |<e, R - e(V)_I^T x*>|
            index = index[order[:keep]]
        x_f, *_ = np.linalg.lstsq(self.vocab[index].T.astype(np.float64), r.astype(np.float64), rcond=None)
        return index, x_f

    def encode(self, p: np.ndarray, p_prev: np.ndarray) -> list[np.ndarray]:
        ids = np.zeros((len(p), self.phi), np.uint16)
        weights = np.zeros((len(p), self.phi), np.float16)
        for t, r in enumerate(p - p_prev):
            index, x_f = self.compress(r)
            ids[t], weights[t] = index, x_f.astype(np.float16)
        return [ids, weights]

    def decode(self, arrays: list[np.ndarray], p_prev: np.ndarray) -> np.ndarray:
        ids, weights = arrays
        if ids.size and int(ids.max()) >= len(self.vocab):
            raise ValueError(f"lasso update: token id {int(ids.max())} outside the vocabulary of {len(self.vocab)}")
        basis = self.vocab[ids.astype(np.int64)]  # [T, Phi, D]
        return p_prev + np.einsum("tk,tkd->td", weights.astype(np.float32), basis)


class FullCodec(Codec):
    """FullDownload (Table 1, K.): the averaged prompt p itself as float16 ``[T, D]``."""

    name = "full"

    def specs(self, t: int, d: int) -> list[ArraySpec]:
        return [ArraySpec("prompt", (t, d), "float16")]

    def encode(self, p: np.ndarray, p_prev: np.ndarray) -> list[np.ndarray]:
        return [p.astype(np.float16)]

    def decode(self, arrays: list[np.ndarray], p_prev: np.ndarray) -> np.ndarray:
        return arrays[0].astype(np.float32)


class PCACodec(Codec):
    """PCA download of App. E: p' = mu + p_hat E_c[:n] with p_hat = (p - mu) E_c[:n]^T.

    E_c are the principal components of e(V) (eq. 13). Eqs. (15)-(16) are written
    without the mean; we subtract and add back mu = mean of e(V), which both sides
    know, so it costs no bytes and the top-n reconstruction is PCA's usual one.
    """

    name = "pca"

    def __init__(self, vocab: np.ndarray, n: int) -> None:
        self.mu, self.components = _principal_components(vocab, n)

    def specs(self, t: int, d: int) -> list[ArraySpec]:
        return [ArraySpec("coefficients", (t, len(self.components)), "float16")]

    def encode(self, p: np.ndarray, p_prev: np.ndarray) -> list[np.ndarray]:
        return [((p - self.mu) @ self.components.T).astype(np.float16)]

    def decode(self, arrays: list[np.ndarray], p_prev: np.ndarray) -> np.ndarray:
        return self.mu + arrays[0].astype(np.float32) @ self.components


class QuantCodec(Codec):
    """b-bit quantization of App. E: w_q = beta Q(clip(w, -beta, beta) / beta) (eq. 17).

    beta = max |p[t, :]| per prompt token (eq. 18), sent as float16; Q rounds to the
    nearest of {-1, -(k-1)/k, ..., 0, ..., 1} with k = 2^(b-1) - 1, i.e. 2k+1 levels
    coded as ``round(w / beta * k) + k`` in b bits, bit-packed into ``uint8``.
    """

    name = "quant"

    def __init__(self, bits: int) -> None:
        self.bits, self.k = bits, 2 ** (bits - 1) - 1

    def specs(self, t: int, d: int) -> list[ArraySpec]:
        return [ArraySpec("codes", (-(-t * d * self.bits // 8),), "uint8"), ArraySpec("scale", (t,), "float16")]

    def encode(self, p: np.ndarray, p_prev: np.ndarray) -> list[np.ndarray]:
        beta = np.abs(p).max(axis=1).astype(np.float16)
        b = np.maximum(beta.astype(np.float32), np.finfo(np.float32).tiny)[:, None]
        codes = (np.rint(np.clip(p / b, -1, 1) * self.k) + self.k).astype(np.uint8)  # 0..2k < 2^b
        bits = np.unpackbits(codes[..., None], axis=-1)[..., 8 - self.bits :]  # low b bits, MSB first
        return [np.packbits(bits.reshape(-1)), beta]

    def decode(self, arrays: list[np.ndarray], p_prev: np.ndarray) -> np.ndarray:
        packed, beta = arrays
        t, d = p_prev.shape
        bits = np.unpackbits(packed)[: t * d * self.bits].reshape(t, d, self.bits)
        codes = (bits.astype(np.int32) << np.arange(self.bits - 1, -1, -1)).sum(-1)
        return (beta.astype(np.float32)[:, None] * (codes - self.k) / self.k).astype(np.float32)


def _centred_svd(vocab: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mu ``[D]``, V^T ``[D, D]``) of e(V) - mu = U S V^T, in float64: every principal direction
    of e(V), strongest first (App. E eqs. 13-16)."""
    v = vocab.astype(np.float64)
    mu = v.mean(0)
    _, _, vt = np.linalg.svd(v - mu, full_matrices=False)
    return mu, vt


# :func:`_centred_svd` by the vocabulary's bytes: the SVD of MiniLM's [30522, 384] e(V) takes ~3 s on
# one core, and every n (pca-components), config and backbone object of a process would redo it for
# the same e(V) (the top n are a slice of one SVD). At most SVD_CACHE_SIZE vocabularies (MPNet-base's
# D = 768: a 4.7 MB V^T each).
_SVD_CACHE: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = {}
SVD_CACHE_SIZE = 4


def _cached_svd(vocab: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_centred_svd` of ``vocab``, computed once a process per vocabulary (its shape, dtype
    and bytes' digest)."""
    key = (vocab.shape, vocab.dtype.str, hashlib.blake2b(np.ascontiguousarray(vocab).data, digest_size=16).digest())
    if key not in _SVD_CACHE:
        while len(_SVD_CACHE) >= SVD_CACHE_SIZE:
            del _SVD_CACHE[next(iter(_SVD_CACHE))]  # the oldest vocabulary first
        _SVD_CACHE[key] = _centred_svd(vocab)
    return _SVD_CACHE[key]


def _principal_components(vocab: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean ``[D]``, top-n principal components ``[n, D]``) of e(V): the first n rows of
    :func:`_centred_svd`'s V^T."""
    if n > vocab.shape[1]:
        raise ConfigError(f"feddls.pca-components={n} exceeds the embedding dimension {vocab.shape[1]}")
    mu, vt = _cached_svd(vocab)
    return mu.astype(np.float32), vt[:n].astype(np.float32)  # copies: no caller holds the cache's arrays


class CodecSettings(Protocol):
    """The keys of ``feddls.*`` the codecs read (:class:`fedtext.methods.feddls.config.FedDLSConfig`
    has them; named here so that this module, which that one imports, need not import it).
    Read-only, as the frozen config's fields are, and hashable (:func:`codec_for` caches)."""

    @property
    def compression(self) -> str:
        """``lasso``, ``full``, ``pca`` or ``quant``."""

    @property
    def phi(self) -> int:
        """Vocabulary tokens per position of a LASSO residual (Φ)."""

    @property
    def lasso_alpha(self) -> float:
        """The LASSO penalty."""

    @property
    def lasso_screen(self) -> int:
        """Tokens screened by correlation before the LASSO."""

    @property
    def pca_components(self) -> int:
        """Principal components of e(V) for ``pca``."""

    @property
    def quant_bits(self) -> int:
        """Bits per value for ``quant``."""


def make_codec(cfg: CodecSettings, vocab: np.ndarray) -> Codec:
    """The download codec that ``feddls.compression`` names (same on server and clients).

    Parameters
    ----------
    cfg
        The method's config (``FedDLSConfig``): which codec and its settings.
    vocab
        e(V), the ``[|V|, D]`` vocabulary embeddings the codecs build prompts from.

    Returns
    -------
    Codec
        A new codec.
    """
    if len(vocab) >= SENTINEL:
        raise ConfigError(f"feddls sends uint16 token ids: vocabulary of {len(vocab)} does not fit below {SENTINEL}")
    builders = {
        "lasso": lambda: LassoCodec(vocab, cfg.phi, cfg.lasso_alpha, cfg.lasso_screen),
        "full": FullCodec,
        "pca": lambda: PCACodec(vocab, cfg.pca_components),
        "quant": lambda: QuantCodec(cfg.quant_bits),
    }
    return builders[cfg.compression]()


@functools.lru_cache(maxsize=4)
def codec_for(cfg: CodecSettings, backbone: Any) -> Codec:
    """:func:`make_codec` on ``backbone``'s e(V), once per process (simulated clients are
    rebuilt for every message; :func:`_cached_svd` keeps the SVD of e(V) itself, ~3 s on one core).

    Parameters
    ----------
    cfg
        The method's config (``FedDLSConfig``; hashable, the cache key with ``backbone``).
    backbone
        A :class:`fedtext.backbone.Backbone` (its ``vocab_embeddings()``).

    Returns
    -------
    Codec
        The process's codec for this config and backbone.
    """
    return make_codec(cfg, backbone.vocab_embeddings())
