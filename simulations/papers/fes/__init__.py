"""FeS's scripts: Table 1 (python -m simulations.papers.fes.table) and the co-planning search (python -m simulations.papers.fes.plan)."""
