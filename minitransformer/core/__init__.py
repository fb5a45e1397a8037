"""The contract every layer keeps: `Module` (parameters found by name, `train()` / `eval()`, the checks of its
inputs), `Parameter` (`.data` and `.grad`, gradients added) and the random generators passed in.

`module.py` is the base class; `contract.py` the checks it holds every backward pass to; `tiers.py` the switch
between the plain and the fast forms of a model's layers (`kernels=`); `checks.py` the checks of options.
"""
