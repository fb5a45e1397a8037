"""`python -m minitransformer gradcheck`: prove every backward pass against finite differences."""

import time

from ..gradcheck.cases import all_cases
from ..gradcheck.checker import DEFAULT_TOLERANCE, check_module

HELP = "check every layer's and a tiny GPT's backward pass against central differences (float64)"


def add_arguments(parser):
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="largest relative error that passes")
    parser.add_argument("--only", default=None, help="comma-separated layer names to check (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the random inputs and upstream gradients")
    parser.add_argument("--verbose", action="store_true", help="one row per case instead of per layer")


def run(args):
    import numpy as np

    only = None if args.only is None else {name.strip() for name in args.only.split(",")}
    rows = {}                                  # layer -> [worst input error, worst param error, cases, failures]
    started = time.perf_counter()
    for case in all_cases():
        if only is not None and case.layer not in only:
            continue
        module, inputs, forward = case.build(np.random.default_rng(args.seed))
        report = check_module(module, inputs, forward=forward, rng=args.seed)
        row = rows.setdefault(case.layer if not args.verbose else case.id, [0.0, 0.0, 0, []])
        row[0] = max(row[0], report.worst_input_error)
        row[1] = max(row[1], report.worst_param_error)
        row[2] += 1
        row[3] += [f"{case.id}: {c.describe()}" for c in report.failures(args.tolerance)]
    if not rows:
        print(f"no gradient check matches --only {args.only}")
        return 2
    width = max(len(name) for name in rows) + 2
    print(f"{'layer':<{width}}{'cases':>6}  {'inputs':>10}  {'params':>10}  result")
    for name, (input_error, param_error, count, failures) in rows.items():
        print(f"{name:<{width}}{count:>6}  {input_error:>10.1e}  {param_error:>10.1e}  {'FAIL' if failures else 'ok'}")
    failed = [line for row in rows.values() for line in row[3]]
    print(f"\n{len(rows) - sum(1 for r in rows.values() if r[3])} of {len(rows)} passed "
          f"(relative error <= {args.tolerance:.0e}, float64) in {time.perf_counter() - started:.1f} s")
    for line in failed:
        print("FAILED " + line)
    return 1 if failed else 0
