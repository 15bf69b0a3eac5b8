"""Test helpers shipped with the package: cluster fixtures (pytest plugin), namespace helpers."""
