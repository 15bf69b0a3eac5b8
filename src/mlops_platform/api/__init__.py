"""InferenceService API types, one module per version."""
