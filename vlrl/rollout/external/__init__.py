"""Agent programs of the user's own as rollout sources (``DataSource.external``).

Per episode, ``ExternalRun`` starts the program (``program``) with an OpenAI-compatible
endpoint bound to its trajectory (``endpoint``); every chat request it makes is answered by the
policy and traced token for token (``tracer``); its reward and the traced sequences go to the
driver like any Agent Loop's. docs/train-your-agent.md is the user's guide.
"""

from vlrl.rollout.external.program import AgentFailed, AgentReport, parse_report, run_program
from vlrl.rollout.external.run import ExternalRun, rollout_tenant

__all__ = ["AgentFailed", "AgentReport", "ExternalRun", "parse_report", "rollout_tenant", "run_program"]
