"""FedAdapter's config and model: Houlsby bottleneck adapters in the frozen encoder, FedAvg.

Houlsby et al., "Parameter-Efficient Transfer Learning for NLP" (ICML 2019), §2.1 and Fig. 2:
two adapters per transformer layer, one after the attention output projection and one after
the feed-forward output projection, each before the residual add and LayerNorm:

    adapter(h) = h + W_up sigma(W_down h + b_down) + b_up        (W_down [m, d], W_up [d, m])

so a layer's output block ``LayerNorm(dropout(proj(x)) + residual)`` becomes
``LayerNorm(adapter(dropout(proj(x))) + residual)``: :class:`fedtext.methods.fedadapter.model.
AdaptedDropout` takes the place of the block's dropout in the model's own copy of the encoder.
Which modules are the two blocks is the encoder's architecture's
(:mod:`fedtext.backbone.architectures`): BERT's and RoBERTa's ``attention.output`` and
``output`` (projection ``dense``), MPNet's ``attention`` (projection ``attn.o``; its dropout
and LayerNorm sit on the attention module) and ``output``; an encoder of another family is one
line. Houlsby also train the layers' LayerNorms, the two that each layer's adapters feed
(``fedadapter.train-layernorm``, default true as in the paper); the pretrained weights stay
frozen.

Why a module of our own: the maintained adapter library (AdapterHub's ``adapters`` 1.3.0)
requires ``transformers~=4.57`` and this project runs transformers 5.x; PEFT has LoRA, IA3,
prefix and prompt tuning but no Houlsby bottleneck adapter. The module is 30 lines
(:class:`fedtext.methods.fedadapter.model.Bottleneck`) and tested against the formula above by
hand (tests/unit/test_fedadapter.py).

Initialisation (seeded by the run seed, the same everywhere): ``W_down`` from a zero-mean
normal with std 1e-2 truncated at two standard deviations (Houlsby §3.6's near-identity
initialisation), biases 0 and ``W_up = 0`` (Houlsby draw W_up like W_down; at exactly zero the
round-0 model is the frozen one, bit for bit, and the first steps still move W_up, whose
gradient ``g sigma(W_down h)^T`` is not zero).

Global arrays = upload: per layer and adapter ``down.weight [m, d]``, ``down.bias [m]``,
``up.weight [d, m]``, ``up.bias [d]`` (and both LayerNorms' ``weight``, ``bias`` ``[d]``), then
the ``linear`` head. Bytes per client-round, each way (float32, 128 B per tensor):

    adapters: 2 L x (4 (2 m d + m + d) + 4 x 128)      LayerNorms: 2 L x 2 x (4 d + 128)

MiniLM-L6 (d = 384, L = 6), m = 64: 12 adapters x 49,600 floats = 595,200 floats = 2,380,800 B
+ 48 headers (6,144 B); 24 LayerNorm tensors: 24 x (1,536 + 128) = 39,936 B; in all
2,426,880 B, plus 3,336 B for a 2-class linear head (2,430,216 B). MPNet-base (d = 768,
L = 12), m = 64: 24 adapters x 99,136 floats = 9,517,056 B + 96 headers (12,288 B); 48
LayerNorm tensors: 48 x (3,072 + 128) = 153,600 B; in all 9,682,944 B. m = 8 (78,432 adapter
floats) costs about what LoRA r = 8 on query and value does (73,728).

Aggregation: the example-weighted mean of every array (the base ``FedTextStrategy.aggregate``);
an adapter is a function of its weights that is not linear in them (sigma between W_down and
W_up), so, as for FedAvg of whole models, the mean model is not the mean of the clients'
functions.
"""
