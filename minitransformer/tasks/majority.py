"""The majority task, generated: does "a" occur more often than "b"? A small counting problem for the GPT
classifier (the `finetune` command, notebook 10).

Strings over {a, b, c} are ids 3, 4, 5 (ids 0-2 stay free for padding and the like, as in reverse.py).
"""

import numpy as np

from ..core.random import as_generator


def majority_task(n, length=12, rng=None):
    """Strings of `length` symbols over {a, b, c} (ids 3, 4, 5) and labels 1 if count(a) > count(b) else 0.

    Ties are avoided by redrawing, so the two classes are balanced by symmetry.
    Returns:
        ids int (n, length), labels int (n,).
    """
    rng = as_generator(rng)
    ids = rng.integers(3, 6, size=(n, length))
    ties = (ids == 3).sum(axis=1) == (ids == 4).sum(axis=1)
    while ties.any():
        ids[ties] = rng.integers(3, 6, size=(int(ties.sum()), length))
        ties = (ids == 3).sum(axis=1) == (ids == 4).sum(axis=1)
    return ids, ((ids == 3).sum(axis=1) > (ids == 4).sum(axis=1)).astype(np.int64)
