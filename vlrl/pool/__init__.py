"""Execution plane: the Harness Pool. Fixed pools of persistent multi-tenant host actors run
Agent Loops (loop hosts) and harness instances (env hosts, one pool per harness codebase)."""

from vlrl.pool.budget import LOOP_POOL, HostBudget
from vlrl.pool.episode import EpisodeResult, ScriptedEpisode
from vlrl.pool.harness_pool import HarnessPool, RunBook
from vlrl.pool.host_config import HostConfig
from vlrl.pool.host_pool import HostLease, HostPool
from vlrl.pool.tenant import EnvAssignment, EnvSession, Tenant, TenantContext, TenantOutcome

__all__ = [
    "LOOP_POOL",
    "EnvAssignment",
    "EnvSession",
    "EpisodeResult",
    "HarnessPool",
    "HostBudget",
    "HostConfig",
    "HostLease",
    "HostPool",
    "RunBook",
    "ScriptedEpisode",
    "Tenant",
    "TenantContext",
    "TenantOutcome",
]
