"""`python -m minitransformer gradcheck`: prove every backward pass against finite differences.

One row per layer (per case with --verbose): the worst relative error over its float inputs and over
its parameters. A column shows "–" when there was nothing to compare: a layer without parameters
(Softmax, ReLU), or one whose only inputs are integer token ids (Embedding, GPT), which have no
gradient. An unknown name in --only is an error that lists the names there are.

By default each input and parameter is checked along random directions (gradcheck/checker.py's quick
check: seconds for the catalogue instead of minutes), and a layer whose directions disagree is checked
coordinate by coordinate, so a failure names its worst coordinate as --full's would; the verdict is the
same but for a miss whose odds the checker's docstring bounds. --full checks every coordinate.
"""

import time

from .errors import UsageError, non_negative_int, positive_float

HELP = "check every layer's and a tiny GPT's backward pass against central differences (float64)"
NOTHING_COMPARED = "–"          # an en dash: no parameter, or no float input, to compare
NOT_IMPLEMENTED = "not implemented"


def add_arguments(parser):
    from ..gradcheck.checker import DEFAULT_TOLERANCE, DIRECTIONS

    parser.add_argument("--tolerance", type=positive_float, default=DEFAULT_TOLERANCE,
                        help="largest relative error that passes")
    parser.add_argument("--only", default=None, metavar="NAMES",
                        help="comma-separated layer names to check, e.g. Linear,LayerNorm (default: all)")
    parser.add_argument("--seed", type=non_negative_int, default=0,
                        help="seed for the random inputs and upstream gradients")
    parser.add_argument("--verbose", action="store_true", help="one row per case instead of per layer")
    parser.add_argument("--full", action="store_true",
                        help="check every coordinate (minutes); by default each input and parameter is checked "
                             f"along {DIRECTIONS} random directions (seconds) and, where they disagree, coordinate "
                             "by coordinate, so that a failure names its worst coordinate either way")


def _selected_cases(only):
    """The catalogue's cases whose layer is named in `only` (comma-separated; None: all), or UsageError."""
    from ..gradcheck.cases import all_cases

    cases = all_cases()
    if only is None:
        return cases
    wanted = [name.strip() for name in only.split(",") if name.strip()]
    from ..exercises.catalogue import EXERCISES

    layers_of = {exercise.name: exercise.layers for exercise in EXERCISES}     # an exercise stands for its layers
    wanted = [layer for name in wanted for layer in layers_of.get(name, (name,))]
    known = list(dict.fromkeys(case.layer for case in cases))           # in catalogue order, once each
    unknown = [name for name in wanted if name not in known]
    if not wanted:
        raise UsageError(f"--only {only!r} names no layer; the layers are: {', '.join(known)}")
    if unknown:
        given = ", ".join(repr(name) for name in unknown)
        raise UsageError(f"--only {only!r}: unknown layer{'s' if len(unknown) > 1 else ''} {given}; "
                         f"the layers are: {', '.join(known)}; or exercises: {', '.join(layers_of)}")
    return [case for case in cases if case.layer in wanted]


def _result(failures):
    """The result column: "not implemented" (a student copy's unwritten exercise), FAIL or ok."""
    return NOT_IMPLEMENTED if any(NOT_IMPLEMENTED in line for line in failures) else "FAIL" if failures else "ok"


def _error_column(worst):
    """The worst error of a column, or an en dash when the layer had nothing of that kind to compare."""
    return f"{NOTHING_COMPARED:>10}" if worst is None else f"{worst:>10.1e}"


def run(args):
    import numpy as np

    from ..gradcheck.checker import DIRECTIONS, check_module

    cases = _selected_cases(args.only)
    rows = {}            # layer -> [worst input error or None, worst param error or None, cases, failures]
    started = time.perf_counter()
    for case in cases:
        row = rows.setdefault(case.layer if not args.verbose else case.id, [None, None, 0, []])
        try:
            module, inputs, forward = case.build(np.random.default_rng(args.seed))
            report = check_module(module, inputs, forward=forward, rng=args.seed, tolerance=args.tolerance,
                                  mode="coordinates" if args.full else "directions")
        except NotImplementedError as error:        # a student copy: an exercise not written yet, a row says so
            row[2] += 1
            row[3].append(f"{case.id}: {NOT_IMPLEMENTED}: {str(error).split(':')[0]}")
            continue
        if report.inputs:
            row[0] = max(row[0] or 0.0, report.worst_input_error)
        if report.params:
            row[1] = max(row[1] or 0.0, report.worst_param_error)
        row[2] += 1
        row[3] += [f"{case.id}: {c.describe()}" for c in report.failures(args.tolerance)]
    width = max(len(name) for name in rows) + 2
    print(f"{'layer':<{width}}{'cases':>6}  {'inputs':>10}  {'params':>10}  result")
    for name, (input_error, param_error, count, failures) in rows.items():
        print(f"{name:<{width}}{count:>6}  {_error_column(input_error)}  {_error_column(param_error)}  "
              f"{_result(failures)}")
    failed = [line for row in rows.values() for line in row[3]]
    how = ("every coordinate" if args.full else f"along {DIRECTIONS} random directions per input and parameter, "
           "every coordinate where they disagree (--full: every coordinate)")
    print(f"\n{len(rows) - sum(1 for r in rows.values() if r[3])} of {len(rows)} passed "
          f"(relative error <= {args.tolerance:.0e}, float64, {how}; {NOTHING_COMPARED}: nothing to compare, "
          f"no parameters or only integer inputs) in {time.perf_counter() - started:.1f} s")
    for line in failed:
        print("FAILED " + line)
    return 1 if failed else 0
