"""Start a student's kernel inside the sandbox, after setting its limits.

    python -m companion.grading.launch --nproc 256 --as BYTES --fsize BYTES -- -f kernel.json ...

The limits are set here, inside the sandbox, rather than before ``bwrap`` starts: there the
process limit counts the processes of this sandbox's user namespace alone (set outside, it would
count every process of the instructor's). The kernel cannot raise them again. Then the kernel
(``ipykernel_launcher``) runs in this same process, with the remaining arguments.
"""
from __future__ import annotations

import argparse
import resource
import runpy
import sys


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="companion.grading.launch")
    parser.add_argument("--nproc", type=int, default=256)
    parser.add_argument("--as", dest="address_space", type=int, default=0, help="bytes of address space (0: none)")
    parser.add_argument("--fsize", type=int, default=2**30)
    args, rest = parser.parse_known_args(argv)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    limits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, args.fsize), (resource.RLIMIT_NPROC, args.nproc)]
    if args.address_space:
        limits.append((resource.RLIMIT_AS, args.address_space))
    for which, value in limits:
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))
    sys.argv = ["ipykernel_launcher", *rest]
    runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
