"""minitransformer: a Transformer language model in pure NumPy, every backward pass written by hand.

Shape legend, used in every docstring of the package:

    B   batch size
    T   time (sequence length); Tq, Tk for queries and keys when they differ
    C   channels, the model width d_model
    H   number of attention heads
    hs  head size, C // H
    V   vocabulary size
"""
