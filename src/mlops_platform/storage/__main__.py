"""``python -m mlops_platform.storage fetch URI DEST [options]``."""

from mlops_platform.storage import cli

if __name__ == "__main__":
    cli.main()
