"""Benchmarks of the project: run one as ``.venv/bin/python -m bench.<script>`` (see ``bench/README.md``)."""
