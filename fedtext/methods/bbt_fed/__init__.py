"""BBT-Fed's config and model: z in ``p0 + A z``, FedAvg of z.

FedDLS App. B-C ("BBT (Fed)"); BBT is Sun et al. (2022). Global arrays = upload =
``z`` float32 ``[d]``: ``d * 4 + 128`` B each way (d=100: 528 B). With
``bbt-fed.average=z-sigma-C`` (FedBPT Fig. 2's contrast) also ``sigma`` ``[1]`` and
``C`` ``[d, d]``: ``4 (d + 1 + d^2) + 3 * 128`` B each way.
"""
