"""gridsplit: run MPI applications across sites.

The Python package holds the command line, the shared topology model and the
orchestration around the daemons (lab, bench, netcheck, model). The daemons
themselves are Rust (crates/) and the node library is C (preload/).
"""

__version__ = "0.1.0"
