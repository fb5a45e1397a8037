"""The gradient checker itself: it must catch a wrong backward and say where, coordinate by coordinate and along
random directions (the quick check, gradcheck/checker.py's docstring), which on a failure checks every coordinate."""

import re
from pathlib import Path

import numpy as np
import pytest

from minitransformer import LayerNorm, Linear, ReLU, check_module, numerical_gradient, rel_error
from minitransformer.__main__ import main
from minitransformer.gradcheck import checker
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


# ---------------------------------------------------------------- the quick check: random directions

def test_directional_derivatives_of_a_known_function_and_array_restored():
    x = np.array([[1.0, -2.0], [0.5, 3.0]])
    original = x.copy()
    directions = checker.random_directions(np.random.default_rng(0), x.shape, count=3)
    np.testing.assert_allclose(np.sum(directions ** 2, axis=(1, 2)), 1.0)             # unit directions
    derivatives = checker.directional_derivatives(lambda: float(np.sum(x ** 3)), x, directions)
    np.testing.assert_allclose(derivatives, [np.sum(3 * original ** 2 * d) for d in directions], rtol=1e-8)
    np.testing.assert_array_equal(x, original)
    empty = checker.random_directions(np.random.default_rng(0), (0, 4))        # nothing to divide by
    assert empty.shape == (checker.DIRECTIONS, 0, 4)


class LinearWithScaledWeightGradient(Linear):
    def backward(self, dout):
        dx = super().backward(dout)
        self.weight.grad *= 1.001
        return dx


class LinearWithInputGradientOfTheWrongSign(Linear):
    def backward(self, dout):
        return -super().backward(dout)


class LinearWithTransposedWeightGradient2(Linear):
    def backward(self, dout):
        dx = super().backward(dout)
        self.weight.grad[...] = self.weight.grad.T.copy()
        return dx


class LinearWithOneWrongCoordinate(Linear):
    """Right everywhere but weight.grad[3, 5], off by the gradient's typical size (one coordinate in 1024)."""

    def backward(self, dout):
        dx = super().backward(dout)
        self.weight.grad[3, 5] += np.sqrt(np.mean(self.weight.grad ** 2))
        return dx


def _x(shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape)


def _layernorm_without_mean_term():
    layer = LayerNormWithoutMeanTerm(5)
    layer.gamma.data[...] = np.random.default_rng(0).standard_normal(5)
    return layer, _x((3, 5))


BROKEN = {   # what is wrong: (layer, input), the array the check must name, the coordinate where it is worst or None
    "scaled by 1.001": (lambda: (LinearWithScaledWeightGradient(6, 4, rng=0), _x((5, 6))), "parameter weight", None),
    "a sign": (lambda: (LinearWithInputGradientOfTheWrongSign(6, 4, rng=0), _x((5, 6))), "input 0", None),
    "a missing term": (_layernorm_without_mean_term, "input 0", None),
    "transposed": (lambda: (LinearWithTransposedWeightGradient2(8, 8, rng=0), _x((5, 8))), "parameter weight", None),
    "one coordinate of 1024": (lambda: (LinearWithOneWrongCoordinate(32, 32, rng=0), _x((7, 32))),
                               "parameter weight", (3, 5)),
}


@pytest.mark.parametrize("what", BROKEN)
def test_the_quick_check_catches_each_kind_of_wrong_backward_and_every_coordinate_then_names_where(what):
    build, name, where = BROKEN[what]
    layer, x = build()
    upstream = np.random.default_rng(2).standard_normal(layer.forward(x).shape)
    along = checker.compare_along_directions(layer, [x], layer.forward, upstream, np.random.default_rng(3))
    assert [c.name for c in along.failures()] == [name], along      # the directions alone see it, far above the bar
    assert min(c.error for c in along.failures()) > 1e3 * checker.DEFAULT_TOLERANCE
    report = check_module(layer, [x], mode="directions")
    assert report.method.startswith(f"every coordinate, checked because {name} scored ")
    assert [c.name for c in report.failures()] == [name]
    if where is not None:
        assert report.failures()[0].worst_index == where
    with pytest.raises(AssertionError, match=rf"{name}: rel_error .* worst at index \(\d+, \d+\)"):
        report.assert_ok()


def test_one_wrong_coordinate_among_1024_is_seen_along_every_draw_of_directions():
    """The docstring's argument: the error along d is (|e|/|g|) |u/w| with |e|/|g| ~ 1/sqrt(1024), so a draw that
    hides it needs every |u| below ~1e-5; over 200 draws the smallest error stays 100 times above the bar."""
    def weight_errors(layer, x, seeds):
        upstream = np.random.default_rng(2).standard_normal((len(x), 32))
        for seed in seeds:
            layer.forward(x)
            report = checker.compare_along_directions(layer, [x], layer.forward, upstream, np.random.default_rng(seed))
            yield report.params[0].error

    layer, x = BROKEN["one coordinate of 1024"][0]()
    assert min(weight_errors(layer, x, range(200))) > 100 * checker.DEFAULT_TOLERANCE
    assert max(weight_errors(Linear(32, 32, rng=0), x, range(20))) < checker.DEFAULT_TOLERANCE / 10    # a right one passes


def test_a_right_backward_passes_the_quick_check_without_checking_coordinates():
    report = check_module(LayerNorm(5), [_x((3, 5))], mode="directions")
    assert report.passed() and report.method == f"along {checker.DIRECTIONS} random directions per input and parameter"
    assert [c.name for c in report.inputs + report.params] == ["input 0", "parameter gamma", "parameter beta"]
    assert all(c.worst_index in {(k,) for k in range(checker.DIRECTIONS)} for c in report.inputs + report.params)
    with pytest.raises(ValueError, match=r"check_module: mode must be one of coordinates, directions, got 'fast'"):
        check_module(LayerNorm(5), [_x((3, 5))], mode="fast")


def test_nan_gradient_fails_the_quick_check_too():
    report = check_module(ReLUWithNaNBackward(), [np.array([[0.5, -0.7]])], mode="directions")
    assert [f.name for f in report.failures()] == ["input 0"] and report.method.startswith("every coordinate")


def test_cli_quick_by_default_full_on_request_and_a_failure_named_by_its_coordinate(capsys, monkeypatch):
    assert main(["gradcheck", "--only", "Linear,LayerNorm"]) == 0
    assert f"along {checker.DIRECTIONS} random directions per input and parameter" in capsys.readouterr().out
    assert main(["gradcheck", "--only", "Linear,LayerNorm", "--full"]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 passed (relative error <= 1e-07, float64, every coordinate;" in out and "random" not in out
    right_backward = Linear.backward

    def one_wrong_coordinate(self, dout):
        dx = right_backward(self, dout)
        self.weight.grad[0, 1] += np.sqrt(np.mean(self.weight.grad ** 2))
        return dx

    monkeypatch.setattr(Linear, "backward", one_wrong_coordinate)
    assert main(["gradcheck", "--only", "Linear"]) == 1
    failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 2 and all(re.match(r"FAILED Linear\[.*\]: parameter weight: rel_error \S+, worst at index "
                                             r"\(0, 1\)", line) for line in failed), failed
