"""Controllers of the operator."""
