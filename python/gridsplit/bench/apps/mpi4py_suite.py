"""mpi4py's own test suite (its test/main.py), run in one rank, each test's outcome written down.

Usage: python3 mpi4py_suite.py TESTDIR OUTDIR [test/main.py options, e.g. -e spawn]

mpi4py's runner prints dots; `gridsplit bench app --preset mpi4py` needs the set
of tests that passed, failed or were skipped on every rank, to compare direct and
split runs. This runs mpi4py's TestProgram as is (its discovery, its skips for
the MPI in use, its options) with a result class that records each test's
outcome, and writes OUTDIR/mpi4py-RANK.json at the end. Rank 0 also prints one
line with the suite's time.
"""

import json
import os
import socket
import sys
import time
import unittest

testdir, outdir = sys.argv[1], sys.argv[2]
sys.path.insert(0, testdir)
import main as mpi4py_main  # noqa: E402  (mpi4py's test/main.py)

outcomes: dict[str, str] = {}


class Result(unittest.TextTestResult):
    def addSuccess(self, test):
        super().addSuccess(test)
        outcomes.setdefault(test.id(), "passed")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            outcomes[test.id()] = "failed"


def _recorded(method: str, outcome: str):
    def record(self, test, *args):
        getattr(unittest.TextTestResult, method)(self, test, *args)
        outcomes[test.id()] = outcome
    return record


for _method, _outcome in (("addFailure", "failed"), ("addError", "failed"), ("addSkip", "skipped"),
                          ("addExpectedFailure", "xfail"), ("addUnexpectedSuccess", "failed")):
    setattr(Result, _method, _recorded(_method, _outcome))


class Runner(unittest.TextTestRunner):
    resultclass = Result


class Program(mpi4py_main.TestProgram):
    def runTests(self):
        self.testRunner = Runner
        t0 = time.monotonic()
        try:
            super().runTests()
        finally:
            seconds = time.monotonic() - t0
            from mpi4py import MPI
            rank = MPI.COMM_WORLD.Get_rank()
            with open(os.path.join(outdir, f"mpi4py-{rank}.json"), "w") as f:
                json.dump({"rank": rank, "host": socket.gethostname(), "seconds": seconds,
                           "outcomes": outcomes}, f)
            if rank == 0:
                print(f"mpi4py suite: {len(outcomes)} tests in {seconds:.3f} s", flush=True)


if __name__ == "__main__":
    sys.dont_write_bytecode = True
    Program(module=None, argv=["main.py", *sys.argv[3:]])
