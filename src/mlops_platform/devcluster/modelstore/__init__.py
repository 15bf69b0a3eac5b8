"""The local cluster's model store: MinIO on the real node with the demo models in it.

``install(name)`` (``mlops-platform dev model-store``; ``make demo`` and the serving tests call it)
builds or takes from the cache the images it needs, imports them into the real nodes, and applies
:mod:`.manifests`: MinIO in ``mlops-models`` (the bucket ``models``) and the seeding Job that trains
the demo models (:mod:`.train`, in the MLServer image) and uploads them (:mod:`.upload`). It returns
once the store answers and the Job has completed; idempotent. :func:`.install.grant` gives a
namespace the Secret an InferenceService names to read the store.
"""
