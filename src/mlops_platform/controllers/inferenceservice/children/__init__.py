"""One module per child kind, each a pure ``build(isvc, ...) -> dict | None``."""
