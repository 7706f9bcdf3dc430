"""FedDRS's model: FedAvg's whole network, named apart so the strategy can distil on it."""

from __future__ import annotations

import numpy as np

from fedtext.comm import ArraySpec
from fedtext.methods.fedavg.model import FedAvgModel


class FedDRSModel(FedAvgModel):
    """FedAvg's arrays (every weight, both ways); an upload adds ``label_counts`` [C]:
    the client's examples per label, from which the server draws γ_k."""

    def upload_specs(self) -> list[ArraySpec]:
        return [*self.global_specs(), ArraySpec("label_counts", (self.backbone.task.num_classes,), "float32")]

    def check_upload(self, upload: dict[str, np.ndarray]) -> str | None:
        counts = upload["label_counts"]
        if (counts < 0).any() or counts.sum() <= 0:
            return f"label_counts must be >= 0 with a positive sum, got {counts.tolist()}"
        return None
