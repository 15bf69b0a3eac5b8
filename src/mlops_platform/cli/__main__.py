"""``python -m mlops_platform.cli ...``: the ``mlops-platform`` command (subprocesses of the tests,
the demo and the benchmarks run the operator so)."""

from mlops_platform import cli

if __name__ == "__main__":
    cli.main()
