"""The rejection rule shared by the engine and the analysis (no torch: `analysis` imports it)."""

import math


def num_kept(n: int, alpha: float) -> int:
    """Candidates an alpha cut keeps: ceil((1 - alpha) * n), at least one.

    The product is rounded to 9 decimals first: (1 - 0.7) * 10 is 3.0000000000000004 in
    floating point, and a bare ceil would keep 4.
    """
    return max(1, math.ceil(round((1.0 - alpha) * n, 9)))
