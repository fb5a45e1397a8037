"""Answers to every exercise for the grading tests: the reference's, a blank copy's, and known-wrong ones.

A known-wrong answer is the reference body with one classic mistake put in (a missing term, a wrong
axis, a bias summed the wrong way), so that it runs and returns arrays of the right shapes: only the
numbers give it away. `tests/fixtures/record_grading_verdicts.py` recorded what the grader said about
each of them before issue 19; `tests/test_grading_attacks.py` grades them again.
"""

from minitransformer.exercises.make import reference_package
from minitransformer.exercises.regions import package_regions, replace_regions

REFERENCE = reference_package()
REGIONS = package_regions(REFERENCE)

# region -> (text of the reference body, what the mistake puts in its place)
WRONG = {
    "attention.forward": ("q @ np.swapaxes(k, -1, -2) * scale", "q @ np.swapaxes(k, -1, -2)"),       # unscaled
    "attention.backward": ("dscores = dscores * self.used_scale", "dscores = dscores"),              # scale forgotten
    "crossentropy.forward": ("- target_shifted) * self.keep", "- target_shifted)"),                  # ignored rows count
    "crossentropy.backward": ("(grad / self.count)", "grad"),                                        # sum, not mean
    "embedding.backward": ("np.add.at(self.weight.grad, ids, dout2d)", "self.weight.grad[ids] += dout2d"),  # repeats
    "gelu.forward": ("GELU_CUBIC * x * x * x", "GELU_CUBIC * x * x"),                              # x^2, not x^3
    "gelu.backward": ("0.5 * (1 + self.t) + 0.5", "0.5 * (1 + self.t) - 0.5"),
    "layernorm.forward": ("(centered ** 2).mean(axis=-1, keepdims=True)",
                          "centered.var(axis=-1, ddof=1, keepdims=True)"),                            # unbiased
    "layernorm.backward": ("g - g.mean(-1, keepdims=True) - ", "g - "),                              # no mean(g)
    "linear.backward": ("self.bias.grad += dout2d.sum(axis=0)", "self.bias.grad += dout2d.mean(axis=0)"),
    "multihead.backward": (" + self.v_proj.backward(self._merge_heads(dv))", ""),                   # no value path
    "relu.backward": ("dout * self.positive", "dout"),
    "softmax.forward": ("total = exp.sum(axis=axis, keepdims=True)", "total = exp.sum()"),          # over everything
    "softmax.backward": ("(dy * y).sum(axis=axis", "dy.sum(axis=axis"),
}


def reference_body(name):
    """The reference's lines between the markers of region `name`."""
    return list(REGIONS[name][1].body)


def wrong_body(name):
    """The reference body of `name` with its known mistake put in."""
    old, new = WRONG[name]
    text = "".join(reference_body(name))
    assert text.count(old) == 1, f"{name}: the mistake's anchor {old!r} is not in the reference body once"
    return text.replace(old, new).splitlines(keepends=True)


def indented(name, *lines):
    """Lines of code at the indentation of region `name`'s markers."""
    indent = REGIONS[name][1].indent
    return [f"{indent}{line}\n" for line in lines]


def put_bodies(copy, bodies):
    """Write region bodies (dict name -> lines) into the student copy `copy`, as a student would."""
    for relative in {REGIONS[name][0] for name in bodies}:
        path = copy / "minitransformer" / relative
        path.write_text(replace_regions(path.read_text(encoding="utf-8"), bodies), encoding="utf-8")


def answers(kind):
    """Region bodies of one kind of answer, for every region: a dict name -> lines ({} for "blank").

    kind: "reference"; "blank"; "wrong forward" (every forward region wrong, the backward regions
    the reference's); "wrong backward" (the reverse).
    """
    if kind == "blank":
        return {}
    if kind == "reference":
        return {name: reference_body(name) for name in REGIONS}
    wrong_part = {"wrong forward": ".forward", "wrong backward": ".backward"}[kind]
    return {name: wrong_body(name) if name.endswith(wrong_part) and name in WRONG else reference_body(name)
            for name in REGIONS}                    # exercises added since the record have no known mistake here


KINDS = ("reference", "blank", "wrong forward", "wrong backward")


# ---------------------------------------------------------------- what the grading tests share

def isolation_levels():
    """pytest params of the isolation levels this machine has: bubblewrap (skipped, with the reason, where
    it does not work) and the process fallback."""
    import pytest

    from minitransformer.exercises.isolation import choose_isolation

    try:
        choose_isolation("bubblewrap")
        bubblewrap = pytest.param("bubblewrap", id="bubblewrap")
    except RuntimeError as error:
        bubblewrap = pytest.param("bubblewrap", id="bubblewrap", marks=pytest.mark.skip(reason=str(error)))
    return [bubblewrap, pytest.param("process", id="process")]


def make_once(tmp_path_factory, only):
    """A student copy with `only` assigned, made once for a test module (making one takes seconds)."""
    from minitransformer.exercises.make import make_student_copy

    out = tmp_path_factory.mktemp("made") / "student"
    make_student_copy(out, only=only)
    return out


def fresh_copy(made, tmp_path):
    """A copy of the module's student copy that one test may change freely."""
    import shutil

    copy = tmp_path / "student"
    shutil.copytree(made, copy)
    return copy
