"""The gradient checker (`checker.py`) and the catalogues of cases it runs (`cases/`).

`check_module(layer, inputs)` compares a layer's hand-written backward pass with
central differences; `python -m minitransformer gradcheck` runs it on every case of
`cases.all_cases()`. Tests, exercises and users call the same code.
"""

from .checker import DEFAULT_TOLERANCE, GradcheckReport, check_module, numerical_gradient, rel_error
