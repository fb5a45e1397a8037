"""The contract every layer keeps: `Module` (parameters found by name, `train()` / `eval()`, the checks of its
inputs), `Parameter` (`.data` and `.grad`, gradients added) and the random generators passed in."""
