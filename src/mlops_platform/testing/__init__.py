"""Test helpers shipped with the package: cluster fixtures (pytest plugin), namespace helpers, waits
(``wait``), object probes (``probes``), the InferenceService manifest factory (``isvc``), fakes."""
