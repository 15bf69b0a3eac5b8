"""The storage initializer: ``python -m mlops_platform.storage fetch URI DEST [options]``.

Runs as the ``storage-initializer`` init container of a model-server pod whose model is remote
(``s3://``, ``gs://``, ``http(s)://``), from the operator's own image: it fetches the model with
``obstore`` (streaming to disk, ranged resumes, retries), verifies ``--sha256``, unpacks an archive
safely and lays the files out as the runtime expects them (``--layout``), then exits 0; on any
failure it exits non-zero with ONE line ``model download failed: <reason>`` in the termination log
and on stderr. ``docs/model-delivery.md`` is the reference.

Modules: ``cli`` (the command line and the failure line), ``initializer`` (the steps), ``stores``
(URI and credentials to an obstore store), ``transfer`` (one object to one file), ``archives`` (safe
unpacking), ``layouts`` (per runtime), ``failure`` (the one exception and how obstore errors read).
"""
