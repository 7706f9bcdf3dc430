"""The tests' settings for federated rounds in this process (simulations/inprocess.py: the
ServerApp's server and strategy drive the ClientApp's clients through in-process proxies that
cross Flower's message conversion, no Ray). Shared by the tiers: the unit tier's round loop
(tests/unit/test_round_loop.py, test_methods_rounds.py, test_method_metrics.py) and the
integration tier's golden records and precision rounds.

Plumbing runs use :data:`TINY_BERT`, a 2-layer encoder of width 32 with seeded random weights
(``model=tiny-bert weights=random``, fedtext/backbone/shapes.py): a round of any method takes
about a second, where the offline MiniLM-L6 took seconds to minutes. What depends on the
pretrained weights (the goldens, the demo, the papers' math against the authors' code) keeps
MiniLM.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedtext.common.registry import METHODS
from simulations.inprocess import InProcessProxy, run

__all__ = ["InProcessProxy", "ON_TWO_LAYERS", "TINY", "TINY_BERT", "one_round", "run", "smoke", "tiny_bert"]

# 2 clients, 1 round, 4 shots per class and a 4-token prompt: seconds per method on 2 cores
TINY = {"num-server-rounds": 1, "shots-per-class": 4, "client-test-size": 8, "eval-size": 16,
        "prompt-length": 4, "max-length": 32, "seed": 0}
# the random 2-layer encoder of width D = 32 (BERT-uncased vocabulary: the offline default's tokenizer)
TINY_BERT = {"model": "tiny-bert", "weights": "random"}
TINY_BERT_D, TINY_BERT_LAYERS = 32, 2
# its encoder: embeddings (30,522 + 512 + 2 positions/types x 32, LayerNorm) 993,216 weights in 5 tensors;
# per layer Q, K, V, attention output (32 x 32 + 32 each), LayerNorm, FFN in (32 x 64 + 64) and out
# (64 x 32 + 32), LayerNorm: 8,544 in 16 tensors; pooler 1,056 in 2
TINY_BERT_WEIGHTS, TINY_BERT_TENSORS = 993_216 + 2 * 8_544 + 1_056, 5 + 2 * 16 + 2
# a method's keys that must fit 2 layers: FeS's default plan freezes 4 of MiniLM-L6's 6 layers and
# makes 2 bias-only (a plan of more layers than the encoder has is a ConfigError)
ON_TWO_LAYERS: dict[str, dict[str, Any]] = {"fes": {"fes.frozen-layers": 1, "fes.bias-layers": 1}}


def smoke(method: str) -> dict[str, Any]:
    """A method's smallest useful keys as run-config keys: what its config declares as
    ``smoke`` (fedtext.common.config.MethodConfig.smoke; {} runs its defaults)."""
    config = METHODS[method]
    return config.run_config(config.smoke)


def tiny_bert(method: str) -> dict[str, Any]:
    """The run-config keys that put ``method`` on :data:`TINY_BERT`."""
    return {**TINY_BERT, **ON_TWO_LAYERS.get(method, {})}


def one_round(method: str, tmp_path: Path, clients: int = 2, **extra: Any) -> list[dict[str, Any]]:
    """One round of ``method`` on the demo task with ``clients`` in-process clients; the
    run's round records (round 0 and round 1); the run finished."""
    folder, rounds = run({"method": method, **TINY, **smoke(method), **extra}, tmp_path, clients)
    assert json.loads((folder / "summary.json").read_text())["status"] == "finished"
    return rounds
