"""The InferenceService controller: pure builders per child kind and the reconciler."""
