"""Fed P-tuning v2's config and model: trainable prefix keys and values at every layer.

P-tuning v2 (Liu et al. 2022, "deep prompt tuning"), the "Fed P-tuning V2" baseline of
FedDPG's Table 1 (``../shared/papers/004_03995fac2178d15f.txt`` §4.1, Fig. 1): at each of
the L encoder layers, T trainable prefix vectors enter every attention as extra keys
and values (Li & Liang's prefix-tuning without the reparameterisation MLP, P-tuning
v2's default for classification); the PLM stays frozen; clients train the prefixes by
back-propagation and the server averages them (FedAvg, example-weighted, as FedPrompt).

How the prefixes enter: T placeholder positions are inserted after [CLS] (as every
prompt method here does), and at every layer forward hooks on the self-attention's
``key`` and ``value`` projections overwrite those positions' outputs with that layer's
prefix key ``K_l [T, D]`` and value ``V_l [T, D]``. So what text tokens attend to at
layer l is exactly ``[K_l; W_k h]`` / ``[V_l; W_v h]``, as with HF ``past_key_values``
(the text's positions shift by T, as they do there). The placeholders' own outputs
are left out of the pooled heads (``pool_prompt=False``): a prefix is keys and values,
not an output position. Which modules are the key and value projections is
the encoder's architecture's (:mod:`fedtext.backbone.architectures`: BERT's and RoBERTa's
``attention.self.key``/``value``, MPNet's ``attention.attn.k``/``v``). On MPNet the
relative-position bias between a text token and a prefix position applies as between any
two tokens that far apart: the prefixes sit at positions 1..T there too.

Global arrays = upload = ``prefix.key`` and ``prefix.value``, float32 ``[L, T, D]`` each:
``2 · 4·L·T·D + 2·128`` B each way (MiniLM: L = 6, D = 384, T = 8: 147,712 B).
They start as the keys and values the frozen encoder computes at each layer for T
natural tokens drawn from the run seed (``[CLS] t_1..t_T [SEP]``), so the first
prefix already has the scale of real keys and values (P-tuning v2 draws them from
N(0, 1), far off the scale of a MiniLM key; the paper is silent).
"""
