"""The OpenAI-compatible endpoint of one trajectory: loopback only, one random key, one tracer.

``GET /v1/models`` lists the policy; ``POST /v1/chat/completions`` is answered by the
``ChatTracer``. Errors come in OpenAI's shape (``vlrl serve``'s ``ApiError``), so the agent's
``openai`` client raises its usual exceptions. The endpoint lives as long as its run.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from typing import Any

from aiohttp import web

from vlrl.rollout.external.tracer import ChatTracer
from vlrl.rollout.server.wire import ApiError

MODEL_NAME = "policy"
"""The model id the endpoint lists; requests may name any model (they all get the policy)."""

log = logging.getLogger(__name__)


class TracedEndpoint:
    def __init__(self, tracer: ChatTracer) -> None:
        self.tracer = tracer
        self.api_key = secrets.token_hex(16)
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        """Listen on a free loopback port; return the base URL the agent's client takes (``.../v1``)."""
        app = web.Application(client_max_size=64 * 2**20, middlewares=[self._errors])
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        return f"http://{host}:{port}/v1"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        await self.tracer.close()

    @web.middleware
    async def _errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            sent = request.headers.get("Authorization", "")
            if not hmac.compare_digest(sent.encode(errors="surrogateescape"), f"Bearer {self.api_key}".encode()):
                raise ApiError("invalid or missing API key; send the OPENAI_API_KEY this run was given", status=401)
            return await handler(request)
        except ApiError as error:
            return web.json_response(error.body(), status=error.status)
        except web.HTTPException as error:
            return web.json_response(ApiError(error.reason, status=error.status).body(), status=error.status)
        except Exception as error:
            log.warning("trajectory %s: request failed: %r", self.tracer.trajectory.trajectory_id, error)
            failed = ApiError(f"the policy could not answer: {type(error).__name__}: {error}", status=500)
            return web.json_response(failed.body(), status=500)

    async def _models(self, request: web.Request) -> web.Response:
        model = {"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "vlrl"}
        return web.json_response({"object": "list", "data": [model]})

    async def _chat(self, request: web.Request) -> web.Response:
        return web.json_response(await self.tracer.answer(await request.read()))
