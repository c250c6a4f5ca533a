"""ElasticQuota: a tenant's pods stay within its ElasticQuota (max; non-preemptible pods
within the guarantee; gangs charged whole)."""

from gpusched.plugins.elastic_quota.plugin import ElasticQuota

__all__ = ["ElasticQuota"]
