"""Caching: reflector/informer, indexed store, the shared cache, and kinds (served-version
resolution, optional kinds followed live from their CRDs)."""
