"""The GPU workloads of every validation run, behind one entry point::

    python3 -m bench.gpu.workloads NAME [--seconds S] [--dry-run] [family options]

Families (one submodule each): ``panel`` (gpu_validation.py), ``diag`` (diagnosis.py, and the
footprint run's load) and ``transfer`` (transfers.py). ``core`` holds what they share; the
``registry`` maps each name to its family. Importing this package loads no torch.
"""
