"""FedDPG's scripts: the unlearning experiment (python -m simulations.papers.feddpg.unlearning)."""
