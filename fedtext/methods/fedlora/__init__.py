"""FedLoRA's config and model: LoRA on the frozen encoder through Hugging Face PEFT, FedAvg of
each factor.

LoRA (Hu et al., ICLR 2022, eq. (3)): a frozen linear layer ``h = W x`` becomes
``h = W x + (alpha / r) B A x`` with ``A [r, d_in]`` and ``B [d_out, r]`` trainable, ``r <<
min(d_in, d_out)``; A starts random, B at zero, so the round-0 model is the pretrained one.
The layers are PEFT's own (``peft.inject_adapter_in_model(LoraConfig(...), encoder)``, PEFT's
scaling ``alpha / r``), injected into the model's own copy of the encoder only
(:mod:`fedtext.methods.injected`). ``target-modules`` names the wrapped linear layers by their
last name, inside the transformer layers only (the pooler and an MLM head keep theirs).

Global arrays = upload: every ``lora_A`` and ``lora_B`` weight, in layer order, then
``head.weight`` ``[C, D]`` and ``head.bias`` ``[C]`` with the ``linear`` head. Bytes per
client-round, each way (float32, one 128 B NPY header per tensor):

    4 x r x (d_in + d_out) x L x |targets|  +  128 x 2 x L x |targets|

i.e. ``r (d_in + d_out)`` floats per wrapped layer (A: ``r d_in``, B: ``d_out r``). MiniLM-L6
(d = 384, L = 6), r = 8, query + value: 8 x 768 x 6 x 2 = 73,728 floats = 294,912 B, plus 24
headers (3,072 B): 297,984 B; a 2-class linear head adds 4 x (2 x 384 + 2) + 2 x 128 = 3,336 B
(301,320 B). With ``freeze-a`` only B travels: ``r d_out`` floats per layer, 36,864 floats,
147,456 + 12 x 128 = 148,992 B (152,328 B with the head). Full fine-tuning (fedavg) sends
90,869,384 B: 300 times as much.

Aggregation: the server takes the example-weighted mean of A and of B separately, as
FederatedScope-LLM and FlowerTune do (the base ``FedTextStrategy.aggregate``). That is not
the mean of the clients' updates: ``mean_k(B_k) mean_k(A_k) != mean_k(B_k A_k)`` (the cross
terms ``B_j A_k``, j != k, enter the product of the means), so the global ΔW is not the average
of the clients' ΔW once the clients' A differ. ``freeze-a`` (FFA-LoRA, Sun et al., ICLR 2024)
removes that error: every client keeps the same seeded A, so ``mean_k(B_k) A = mean_k(B_k A)``
exactly, and only B (half the bytes) travels.
"""
