"""gridlab: an emulated multi-site grid on one Linux machine.

realize.py builds and removes it, check.py proves its fidelity, mpi.py runs real
MPI across its nodes, counters.py reads per-namespace TCP counters, fault.py
injects and undoes WAN faults, cli.py is the `gridsplit lab` command group.
"""
