"""FedPrompt's config and model: a soft prompt ``[T, D]`` trained by back-propagation.

"Prompt Tuning (Fed)" of FedDLS App. C (Guo et al. 2022; Zhao et al. 2023): the only
trainable (and communicated) parameters are T prompt vectors; the PLM stays frozen.
Global arrays = upload = ``prompt`` float32 ``[T, D]``: ``T * D * 4 + 128`` B each way
(T=8, D=384: 12,416 B).
"""
