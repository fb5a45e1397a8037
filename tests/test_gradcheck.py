"""The gradient checker itself: it must catch a wrong backward and say where."""

from pathlib import Path

import numpy as np
import pytest

from minitransformer import LayerNorm, Linear, ReLU, check_module, numerical_gradient, rel_error
from minitransformer.__main__ import main
from minitransformer.gradcheck.cases import all_cases


def test_rel_error_definition():
    assert rel_error(np.zeros(3), np.zeros(3)) == 0.0
    assert rel_error([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert rel_error([1.0, -1.0], [1.0, 1.0]) == pytest.approx(2.0 / 2.0)
    assert rel_error([3.0], [1.0]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="same shape"):
        rel_error(np.zeros(2), np.zeros(3))


class ReLUWithNaNBackward(ReLU):
    def backward(self, dout):
        return super().backward(dout) * np.nan


def test_nan_gradient_fails_instead_of_slipping_through():
    assert rel_error([np.nan, 1.0], [1.0, 1.0]) == float("inf")
    report = check_module(ReLUWithNaNBackward(), [np.array([[0.5, -0.7]])])
    assert not report.passed() and [f.name for f in report.failures()] == ["input 0"]
    with pytest.raises(AssertionError, match="input 0"):
        report.assert_ok()


def test_numerical_gradient_of_a_known_function_and_array_restored():
    x = np.array([1.0, -2.0, 0.5])
    original = x.copy()
    grad = numerical_gradient(lambda: float(np.sum(x ** 3)), x)
    np.testing.assert_allclose(grad, 3 * original ** 2, rtol=1e-8)
    np.testing.assert_array_equal(x, original)


class LayerNormWithoutMeanTerm(LayerNorm):
    """A classic student mistake: dx = (g - xhat * mean(g * xhat)) / sigma, forgetting -mean(g)."""

    def backward(self, dout):
        g = dout * self.gamma.data
        self.gamma.grad += (dout * self.xhat).reshape(-1, self.d).sum(axis=0)
        self.beta.grad += dout.reshape(-1, self.d).sum(axis=0)
        return self.rstd * (g - self.xhat * (g * self.xhat).mean(axis=-1, keepdims=True))


def test_wrong_layernorm_backward_is_caught_and_located():
    layer = LayerNormWithoutMeanTerm(5)
    layer.gamma.data[...] = np.random.default_rng(0).standard_normal(5)
    report = check_module(layer, [np.random.default_rng(1).standard_normal((3, 5))])
    assert not report.passed()
    assert report.worst_input_error > 1e-3
    assert report.worst_param_error < 1e-7                      # the parameter gradients are right
    failures = report.failures()
    assert [f.name for f in failures] == ["input 0"]
    assert len(failures[0].worst_index) == 2
    with pytest.raises(AssertionError, match=r"input 0: rel_error .* worst at index \(\d, \d\)"):
        report.assert_ok()


class LinearWithTransposedWeightGradient(Linear):
    def backward(self, dout):
        dx = super().backward(dout)
        self.weight.grad[...] = self.weight.grad[::-1]           # scrambled rows
        return dx


def test_wrong_parameter_gradient_is_named():
    layer = LinearWithTransposedWeightGradient(3, 3, rng=0)
    report = check_module(layer, [np.random.default_rng(1).standard_normal((4, 3))])
    assert [f.name for f in report.failures()] == ["parameter weight"]


def test_checker_refuses_float32():
    with pytest.raises(TypeError, match="must be float64"):
        check_module(Linear(3, 2, dtype=np.float32), [np.zeros((2, 3), dtype=np.float32)])


def test_catalogue_covers_every_exported_layer_at_two_shapes():
    counts = {}
    for case in all_cases():
        counts[case.layer] = counts.get(case.layer, 0) + 1
    for layer in ["Softmax", "Linear", "ReLU", "GELU", "LayerNorm", "Dropout", "Embedding",
                  "SinusoidalPositionalEncoding", "LearnedPositionalEmbedding", "ScaledDotProductAttention",
                  "MultiHeadAttention", "FeedForward", "TransformerBlock", "CrossEntropyLoss", "GPT"]:
        assert counts.get(layer, 0) >= 2, f"{layer} has {counts.get(layer, 0)} gradient-check cases, want >= 2"


def test_cli_prints_a_row_per_layer_and_exit_code(capsys):
    assert main(["gradcheck", "--only", "Linear,LayerNorm"]) == 0
    out = capsys.readouterr().out
    assert "Linear" in out and "LayerNorm" in out and "2 of 2 passed" in out
    assert main(["gradcheck", "--only", "Linear", "--tolerance", "1e-30"]) == 1
    assert "FAILED Linear" in capsys.readouterr().out
    assert main(["gradcheck", "--only", "NoSuchLayer"]) == 2


def test_cli_prints_an_en_dash_where_there_was_nothing_to_compare(capsys):
    """Softmax has no parameters and Embedding only integer inputs: "–", not a measured 0.0e+00."""
    assert main(["gradcheck", "--only", "Softmax,Embedding,Linear"]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[1:4]}
    assert rows["Softmax"][2] == "–" and rows["Softmax"][1] != "–"            # cases, inputs, params, result
    assert rows["Embedding"][1] == "–" and rows["Embedding"][2] != "–"
    assert "–" not in rows["Linear"] and float(rows["Linear"][1]) < 1e-7


README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_gradient_checker_example_runs_and_passes():
    section = README.read_text(encoding="utf-8").split("## The gradient checker", 1)[1].split("\n## ", 1)[0]
    snippet = section.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(snippet, "README.md", "exec"), {})                  # raises AssertionError if the check fails


def test_an_integer_seed_never_makes_the_upstream_gradient_equal_to_the_callers_input():
    """With G == x, LayerNorm's dx is ~0 and the check measured noise (the README example once failed so)."""
    x = np.random.default_rng(0).standard_normal((3, 5))
    check_module(LayerNorm(5), [x], rng=0).assert_ok(1e-7)
