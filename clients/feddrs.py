"""FedDRS client: ``fedavg``'s local fine-tuning, plus the label counts the server draws γ_k from."""

from __future__ import annotations

import numpy as np
from flwr.common import NDArrays, Scalar

from clients.fedavg import FedAvgClient
from fedtext.methods.feddrs.model import FedDRSModel


class FedDRSClient(FedAvgClient):
    """Fine-tunes as :class:`FedAvgClient`; appends ``label_counts`` [C] (float32, its
    training examples per label) to the upload (``FedDRSModel.upload_specs``)."""

    model: FedDRSModel

    def train(self, arrays: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, float]:
        trained, n, loss = super().train(arrays, config)
        labels = self.train_batch.labels.numpy()
        counts = np.bincount(labels, minlength=self.task.num_classes).astype(np.float32)
        return [*trained, counts], n, loss
