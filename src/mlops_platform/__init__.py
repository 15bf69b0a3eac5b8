"""mlops-platform: one InferenceService manifest -> a converged model-inference service."""

__version__ = "0.1.0"
