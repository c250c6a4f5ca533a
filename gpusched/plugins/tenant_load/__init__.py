"""TenantLoad: nodes already loaded by the pod's tenant score lower."""

from gpusched.plugins.tenant_load.plugin import TenantLoad

__all__ = ["TenantLoad"]
