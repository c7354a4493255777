"""An engine replica that is a Ray actor (the embedded engine), seen as an ``Endpoint``.

Images go raw (numpy, zero-copy on one node). The request is put into the object store on a
thread, so serialising megabytes of pixels never stalls the loop host's event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from vlrl.rollout.client import EndpointUnavailable, TransientEndpointError
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, GenerateResult


class RayEndpoint:
    def __init__(self, actor: Any, name: str) -> None:
        self._actor = actor
        self.name = name

    async def generate(self, request: GenerateRequest) -> GenerateResult | CacheMiss:
        ref = await asyncio.to_thread(ray.put, request) if request.image_bytes else request
        return await self._call(self._actor.generate, ref)

    async def load(self) -> int:
        return await self._call(self._actor.load)

    async def forget(self, trajectory_id: str) -> None:
        await self._call(self._actor.forget, trajectory_id)

    async def _call(self, method: Any, *args: Any) -> Any:
        try:
            return await method.remote(*args)
        except RayActorError as error:
            raise EndpointUnavailable(f"{self.name}: {type(error).__name__}") from error
        except GetTimeoutError as error:
            raise TransientEndpointError(str(error)) from error
