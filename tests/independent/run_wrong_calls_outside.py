"""Run the cases of wrong_calls_outside.py and classify each outcome.

    OMP_NUM_THREADS=1 .venv/bin/python tests/independent/run_wrong_calls_outside.py [ids or modules ...]

One worker process per module runs its cases one after the other, each in a fresh namespace under a
60 s alarm (the imports are paid once: the machine is slow). A worker that dies (segfault, abort) is
restarted after the case that killed it, which is recorded as CRASH. Results go to
wrong_calls_outside_results.json next to this file and a table is printed.

Classes: CLEAR, UNCLEAR, SILENT, OK, CRASH (see the module docstring of wrong_calls_outside.py);
``CLEAR?`` is printed where the automatic rule is unsure (an accepted exception type whose message
contains none of the case's ``args``): the case's ``verdict`` field, filled by hand, decides.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import wrong_calls_outside as W  # noqa: E402

CLEAR_TYPES = ("ValueError", "TypeError", "FloatingPointError", "FileNotFoundError", "IsADirectoryError",
               "NotADirectoryError", "PermissionError")
MARK = "@@CASE@@ "


class CaseTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise CaseTimeout("timed out after 60 s")


def worker(ids: list[str]) -> None:
    """Run the named cases in this process; one JSON line per case on stdout."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    base: dict = {}
    exec(compile(W.PRELUDE, "<prelude>", "exec"), base)
    by_id = {c["id"]: c for c in W.CASES}
    signal.signal(signal.SIGALRM, _alarm)
    for cid in ids:
        c = by_id[cid]
        print(MARK + json.dumps({"id": cid, "start": True}), flush=True)
        ns = dict(base)
        base["torch"].manual_seed(0)
        out: dict = {"id": cid}
        signal.alarm(60)
        try:
            exec(compile(c["code"], f"<case {cid}>", "exec"), ns)
            out["raised"] = None
            r = ns.get("r")
            out["result"] = repr(r)[:300] if r is not None else None
        except CaseTimeout:
            out["raised"] = "TIMEOUT"
            out["message"] = "timed out after 60 s"
        except BaseException as e:  # noqa: BLE001 - we classify everything
            signal.alarm(0)
            tb = traceback.extract_tb(e.__traceback__)
            last = tb[-1] if tb else None
            out["raised"] = type(e).__name__
            out["message"] = str(e)[:600]
            out["where"] = f"{last.filename}:{last.lineno}" if last else ""
            out["frames"] = [f"{f.filename}:{f.lineno}" for f in tb][-4:]
        finally:
            signal.alarm(0)
        print(MARK + json.dumps(out), flush=True)


def run_module(ids: list[str]) -> dict[str, dict]:
    results: dict[str, dict] = {}
    todo = list(ids)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    while todo:
        p = subprocess.run([sys.executable, __file__, "--worker", *todo], capture_output=True, text=True,
                           env=env, timeout=60 * len(todo) + 300)
        started = None
        for line in p.stdout.splitlines():
            if not line.startswith(MARK):
                continue
            d = json.loads(line[len(MARK):])
            if d.get("start"):
                started = d["id"]
            else:
                results[d["id"]] = d
                started = None
        if started is not None:  # the worker died inside this case
            results[started] = {"id": started, "raised": "CRASH",
                                "message": f"worker died (rc {p.returncode}): {p.stderr[-400:]}"}
        done = set(results)
        if p.returncode != 0 and started is None and not all(i in done for i in todo):
            for i in todo:
                results.setdefault(i, {"id": i, "raised": "CRASH", "message": p.stderr[-400:]})
        todo = [i for i in todo if i not in results]
    return results


def classify(case: dict, res: dict) -> tuple[str, str]:
    raised = res.get("raised")
    msg = res.get("message", "")
    if raised in ("CRASH", "TIMEOUT"):
        return "CRASH", msg
    if case["expect"] == "result":
        if raised is None:
            return "OK", res.get("result") or ""
        if raised == "AssertionError":
            return "SILENT", "wrong result: " + msg
        return "UNCLEAR", f"legitimate call refused: {raised}: {msg}"
    if raised is None:
        return "SILENT", "no error; result " + str(res.get("result"))
    text = f"{raised}: {msg}"
    where = res.get("where", "")
    deep = "site-packages" in where or "/lib/python3" in where
    if raised in CLEAR_TYPES and not deep:
        low = msg.lower()
        if any(a.lower() in low for a in case["args"]):
            return "CLEAR", text
        return "CLEAR?", text
    return "UNCLEAR", text + (f"  [raised at {where}]" if where else "")


def main(argv: list[str]) -> None:
    if argv[:1] == ["--worker"]:
        worker(argv[1:])
        return
    wanted = set(argv)
    cases = [c for c in W.CASES if not wanted or c["id"] in wanted or c["module"] in wanted]
    modules: dict[str, list[str]] = {}
    for c in cases:
        modules.setdefault(c["module"], []).append(c["id"])
    results: dict[str, dict] = {}
    with ThreadPoolExecutor(max_workers=3) as pool:
        for r in pool.map(run_module, modules.values()):
            results.update(r)
    out_path = HERE / "wrong_calls_outside_results.json"
    old = json.loads(out_path.read_text()) if out_path.exists() else {}
    table = {}
    for c in cases:
        auto, text = classify(c, results[c["id"]])
        final = c["verdict"] or (auto if auto != "CLEAR?" else "CLEAR?")
        table[c["id"]] = {"module": c["module"], "auto": auto, "verdict": final, "message": text,
                          "note": c.get("note", ""), "code": c["code"], "expect": c["expect"],
                          "raw": results[c["id"]]}
        print(f"{c['id']:6} {c['expect']:6} {auto:8} {final:8} {text[:300]!r}")
    old.update(table)
    out_path.write_text(json.dumps(old, indent=1, ensure_ascii=False))
    counts: dict[str, dict[str, int]] = {}
    for cid, t in old.items():
        m = counts.setdefault(t["module"], {})
        m["tried"] = m.get("tried", 0) + 1
        m[t["verdict"]] = m.get(t["verdict"], 0) + 1
    print(json.dumps(counts, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
