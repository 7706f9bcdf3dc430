"""FedBPT (../shared/papers/003_d1c16544ac440cf9.txt, §4).

Global arrays (what Algorithm 1 sends): ``z`` ``[d]``, ``sigma`` ``[1]`` and, with
``fedbpt.download=full``, ``C`` ``[d, d]`` (float32): ``4 (d + 1 + d^2) + 3 * 128`` B
(d=100: 40,788 B); ``compact`` drops C (clients start from C = I): ``4 (d + 1) + 256``.

Upload: one float32 array ``[z^k_{t+1} (d) | sigma^k_{t,1..I} (I) | F^k(z^k_{t+1}) (1)]``,
``4 (d + I + 1) + 128`` B (d=100, I=4: 548 B). :meth:`FedBPTModel.pack_upload` and
:meth:`FedBPTModel.unpack_upload` are its only writer and reader. F is the fitness of
``fedbpt.fitness``: the loss on the unperturbed shots (``perturbed``, the paper), or
loss(shots) / loss(perturbed shots) (``ratio``, the authors' code).

Two server steps (``fedbpt.server-step``), one set of arrays: ``paper`` (Algorithm 2,
:func:`fedtext.methods.fedbpt.cmaes.server_step`) and ``reference``, the authors' public code
(:class:`fedtext.methods.fedbpt.cmaes.ReferenceServerES`). Where the code departs from the paper
(NVIDIA/NVFlare ``research/fed-bpt``, ``src/global_es.py`` and ``src/fedbpt_train.py``,
cma==3.4.0):

===============================  ==========================================  =============================================
                                 paper (§4, Alg. 1-2)                        reference code
===============================  ==========================================  =============================================
server mean                      mean of the best floor(|S|/2), eq. (5)      all m clients, pycma weights of ``CMA_mu=m``
sigma'                           2 sqrt(sum_best sum_j s^2 / (|S| lambda))   sqrt(sum_all sum_j s^2 / (m mu_l))
sigma sent to clients            the server's new sigma                      (sigma_after / sigma') * previous sent sigma
local recombination              mu_l = lambda/2, equal weights              pycma default (log weights, active CMA)
fitness (perturbation on)        loss on perturbed inputs                    loss(shots) / loss(perturbed shots)
perturbation                     new masks every local iteration, r_p=0.9    one perturbed copy per round, 50% replaced
local seed                       --                                          the same seed every round
===============================  ==========================================  =============================================

``server-step=reference`` takes the first four rows (the server's and the local
recombination, so that mu_l in sigma' is what the clients ran); ``fitness=ratio`` the
fifth; the last two stay ours (fresh masks every iteration with ``keep-rate``, a new
seed per client and round), set ``fedbpt.keep-rate=0.5`` for the reference's rate.

Modules: ``config.py`` (keys, no torch), ``model.py`` (global arrays, packed upload), ``cmaes.py``
(Algorithm 2's server step and the authors' reference step), ``perturb.py`` (the clients'
input perturbation); the Flower side: ``strategies/fedbpt.py``, ``clients/fedbpt.py``.
"""
