"""An engine replica that is a Ray actor (the embedded engine), seen as an ``Endpoint``.

Images go raw (numpy, zero-copy on one node). The request is put into the object store on a
thread, so serialising megabytes of pixels never stalls the loop host's event loop. Errors map
onto the client's classes (``vlrl.rollout.client``), as ``OpenAIEndpoint``'s statuses do:

- the actor died or is restarting (``RayActorError``) -> ``EndpointUnavailable``;
- a Ray timeout, or a ``TimeoutError`` raised in the engine -> ``TransientEndpointError``;
- a ``ValueError`` raised in the engine (its admission checks) -> ``BadRequestError``;
- anything else raised in the engine -> ``EngineCallError`` (an ``EngineError``).

The last two name the replica, the call and the cause's type and whole message (not Ray's
coloured wrapper).
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from vlrl.pool.remote_errors import cause_of, describe
from vlrl.rollout.client import BadRequestError, EndpointUnavailable, EngineError, TransientEndpointError
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, GenerateResult


class RayEndpoint:
    takes_tiles = True
    """Every replica actor (embedded or vLLM) assembles tiled images."""

    def __init__(self, actor: Any, name: str) -> None:
        self._actor = actor
        self.name = name

    async def generate(self, request: GenerateRequest) -> GenerateResult | CacheMiss:
        ref = await asyncio.to_thread(ray.put, request) if request.image_bytes else request
        return await self._call("generate", ref)

    async def load(self) -> int:
        return await self._call("load")

    async def forget(self, trajectory_id: str) -> None:
        await self._call("forget", trajectory_id)

    async def _call(self, call: str, *args: Any) -> Any:
        try:
            return await getattr(self._actor, call).remote(*args)
        except RayActorError as error:
            raise EndpointUnavailable(f"{self.name}: {type(error).__name__}") from error
        except GetTimeoutError as error:
            raise TransientEndpointError(str(error)) from error
        except RayTaskError as error:
            message = f"engine {self.name}: {call} raised {describe(error)}"
            cause = cause_of(error)
            if isinstance(cause, ValueError):
                raise BadRequestError(message) from None
            if isinstance(cause, TimeoutError):
                raise TransientEndpointError(message) from None
            raise EngineCallError(message) from None


class EngineCallError(EngineError):
    """A call into an engine replica raised there unexpectedly; the message is the whole cause."""
