"""FedDLS's model: the soft prompt and the token-id upload, shared by its strategy and client.
"""

from __future__ import annotations

import numpy as np

from fedtext.common.comm import ArraySpec
from fedtext.methods.feddls.codecs import check_upload
from fedtext.learning.model import PromptModel


class FedDLSModel(PromptModel):
    """p' is the global prompt; uploads are token ids checked against the natural vocabulary."""

    def upload_specs(self) -> list[ArraySpec]:
        return [ArraySpec("ids", (self.cfg.prompt_length,), "uint16")]

    def check_upload(self, upload: dict[str, np.ndarray]) -> str | None:
        return check_upload(upload["ids"], self.backbone.natural_token_ids())
