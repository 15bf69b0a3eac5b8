"""Install manifests generated from the code: RBAC from the permission declarations, the manager."""
