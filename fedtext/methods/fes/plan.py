"""FeS's co-planning search: the frozen depth that keeps accuracy within a tolerance."""

from __future__ import annotations

from collections.abc import Callable


def search_depth(accuracy_of: Callable[[int], float], low: int, high: int, tolerance: float) -> int:
    """§3.3's offline plan search: the deepest freeze in ``[low, high]`` whose accuracy
    stays within ``tolerance`` of the shallowest freeze's, by binary search.

    ``accuracy_of(frozen)`` trains the plan on a public proxy task (the paper's "FedFSL
    simulator") and returns its accuracy; it is called O(log(high - low)) times. Assumes
    accuracy falls with depth (what binary search needs).
    """
    target = accuracy_of(low) - tolerance
    lo, hi = low, high  # invariant: lo meets the target
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if accuracy_of(mid) >= target:
            lo = mid
        else:
            hi = mid - 1
    return lo
