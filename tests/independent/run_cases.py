"""Run the independent red-team cases against the exercise checkers.

Each case holds a student's answer as Python source. The script executes
the chapter's notebook imports (``PRELUDE``) and then the source in a fresh
namespace, calls the checker named by the case with the argument
expression ``call``, and compares the verdict with ``expect``:

* FALSE PASS      the case is wrong and the checker passed it;
* FALSE REJECT    the case is right and the checker did not pass it;
* INTERNAL        the checker reported an internal error ("could not be
                  checked"), raised an exception itself, or ran past the
                  time limit.

The sources are our own test cases, not user input, so ``exec`` is fine.
They are compiled under a fake file name registered in ``linecache`` so
that ``inspect.getsource`` works on the student's functions, as it does
in a notebook cell.

Usage (from the repository root, with PYTHONPATH set to it)::

    .venv/bin/python tests/independent/run_cases.py            # everything
    .venv/bin/python tests/independent/run_cases.py 2 7        # chapters 2, 7
    .venv/bin/python tests/independent/run_cases.py A          # the appendix
    .venv/bin/python tests/independent/run_cases.py -e 2.1     # one exercise
    .venv/bin/python tests/independent/run_cases.py -v         # every hint

The exit status is 1 if any case is a false pass, a false reject or an
internal error, 2 if a case itself is broken (its source does not run),
and 0 otherwise.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import linecache
import os
import pathlib
import signal
import sys
import time
import traceback
import warnings

HERE = pathlib.Path(__file__).resolve().parent
TIME_LIMIT_S = int(os.environ.get("REDTEAM_TIME_LIMIT", "180"))


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def load_chapter(path):
    spec = importlib.util.spec_from_file_location(f"_redteam_{path.stem}",
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile(source, filename):
    lines = source.splitlines(True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    return compile(source, filename, "exec")


def run_case(case, prelude, index):
    """Return (outcome, status, message, seconds)."""
    import torch

    torch.manual_seed(0)
    namespace = {"__name__": "__main__"}
    filename = f"<redteam-{case['exercise']}-{case['name']}-{index}>"
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(_compile(prelude, filename + "-prelude"), namespace)
            exec(_compile(case["source"], filename), namespace)
            args = eval(f"({case['call']},)", namespace)
        checker = getattr(importlib.import_module(case["module"]),
                          case["checker"])
    except Exception:
        return "CASE ERROR", "", traceback.format_exc(limit=3), 0.0
    start = time.perf_counter()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIME_LIMIT_S)
    try:
        with contextlib.redirect_stdout(io.StringIO()), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            feedback = checker(*args)
    except _Timeout:
        return ("INTERNAL", "timeout",
                f"checker still running after {TIME_LIMIT_S} s",
                time.perf_counter() - start)
    except BaseException as exc:  # the checker itself must never raise
        return ("INTERNAL", "checker raised",
                "".join(traceback.format_exception_only(type(exc), exc)),
                time.perf_counter() - start)
    finally:
        signal.alarm(0)
    seconds = time.perf_counter() - start
    status = str(getattr(feedback, "status", "?"))
    message = str(getattr(feedback, "message", feedback))
    passed = getattr(feedback, "passed", None)
    if status == "internal error" or passed is None:
        outcome = "INTERNAL"
    elif case["expect"] == "wrong":
        outcome = "FALSE PASS" if passed else "ok"
    else:
        outcome = "ok" if passed else "FALSE REJECT"
    return outcome, status, message, seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("chapters", nargs="*",
                        help="chapter numbers or A (default: all)")
    parser.add_argument("-e", "--exercise", action="append",
                        help="only this exercise (e.g. 2.1); repeatable")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print every case's verdict and hint")
    args = parser.parse_args(argv)

    import torch
    torch.set_num_threads(1)

    files = sorted(HERE.glob("ch[0-9][0-9].py")) + sorted(HERE.glob("chA.py"))
    if args.chapters:
        wanted = {c.lstrip("0").upper() for c in args.chapters}
        files = [f for f in files if f.stem[2:].lstrip("0") in wanted]
    rows = {}
    problems = []
    broken = []
    for path in files:
        chapter = load_chapter(path)
        prelude = getattr(chapter, "PRELUDE", "")
        for index, case in enumerate(chapter.CASES):
            if args.exercise and case["exercise"] not in args.exercise:
                continue
            outcome, status, message, seconds = run_case(case, prelude,
                                                         index)
            row = rows.setdefault(case["exercise"], {
                "tried": 0, "wrong": 0, "right": 0, "FALSE PASS": 0,
                "FALSE REJECT": 0, "INTERNAL": 0, "CASE ERROR": 0,
                "seconds": 0.0})
            row["tried"] += 1
            row[case["expect"]] += 1
            row["seconds"] += seconds
            if outcome != "ok":
                row[outcome] += 1
                (broken if outcome == "CASE ERROR" else problems).append(
                    (case, outcome, status, message))
            if args.verbose:
                flat = " ".join(message.split())
                print(f"[{outcome:>12}] {case['exercise']:>5} "
                      f"{case['name']:<28} {case['expect']:<5} "
                      f"{status:<14} {flat[:400]}")

    def key(ex):  # "2.1" < "10.3" < "A.1"
        return tuple((0, int(p), "") if p.isdigit() else (1, 0, p)
                     for p in ex.split("."))

    print()
    print(f"{'exercise':>8} {'tried':>5} {'wrong':>5} {'right':>5} "
          f"{'FALSE PASS':>10} {'FALSE REJ':>9} {'INTERNAL':>8} "
          f"{'CASE ERR':>8} {'secs':>6}")
    total = {k: 0 for k in ("tried", "wrong", "right", "FALSE PASS",
                            "FALSE REJECT", "INTERNAL", "CASE ERROR")}
    for ex in sorted(rows, key=key):
        r = rows[ex]
        for k in total:
            total[k] += r[k]
        print(f"{ex:>8} {r['tried']:>5} {r['wrong']:>5} {r['right']:>5} "
              f"{r['FALSE PASS']:>10} {r['FALSE REJECT']:>9} "
              f"{r['INTERNAL']:>8} {r['CASE ERROR']:>8} "
              f"{r['seconds']:>6.1f}")
    print(f"{'total':>8} {total['tried']:>5} {total['wrong']:>5} "
          f"{total['right']:>5} {total['FALSE PASS']:>10} "
          f"{total['FALSE REJECT']:>9} {total['INTERNAL']:>8} "
          f"{total['CASE ERROR']:>8}")

    for title, items in (("Problems", problems), ("Broken cases", broken)):
        if not items:
            continue
        print(f"\n{title}:")
        for case, outcome, status, message in items:
            flat = " ".join(message.split())
            print(f"- {outcome}: {case['exercise']} {case['name']} "
                  f"({case['expect']}: {case['why']})\n"
                  f"    status={status!r} hint: {flat[:600]}")
    if broken:
        return 2
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
