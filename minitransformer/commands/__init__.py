"""One module per command of `python -m minitransformer`."""
