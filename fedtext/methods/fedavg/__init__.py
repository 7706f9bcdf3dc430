"""FedAvg's config and model: full fine-tuning of the encoder and a ``linear`` head.

The baseline FedDRS and FeS compare against (McMahan et al. 2017): every client
fine-tunes the whole model on its shots and the server takes the example-weighted
mean of every trained tensor. The global arrays are all of them (encoder weights in
``named_parameters`` order, then ``head.weight`` ``[C, D]`` and ``head.bias`` ``[C]``),
float32, one NPY blob each: the whole model travels both ways every client-round
(all-MiniLM-L6-v2 + a 2-class head: 22,713,986 weights in 105 tensors, 90,869,384 B = 86.7 MiB each way).
"""
