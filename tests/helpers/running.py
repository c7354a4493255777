"""``vlrl serve`` inside a test: an ``OpenAIServer`` on a free localhost port, its event loop on a thread."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from dataclasses import replace
from typing import Any

from vlrl.config import validate
from vlrl.rollout.engine import EmbeddedEngine
from vlrl.rollout.http_endpoint import parse_metrics
from vlrl.rollout.server import OpenAIServer


class RunningServer:
    def __init__(self, model_path: str, *, engine: dict[str, Any] | None = None, **config: Any) -> None:
        engine_config = EmbeddedEngine.Config(**(engine or {}))
        self._config = validate(OpenAIServer.Config(model_path=str(model_path), engine=engine_config, port=0, **config))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="test-server", daemon=True)
        self._thread.start()
        self._server = self._config.build()
        self.url = self._run(self._server.start())
        self.model = self._server.model_name

    def restart(self) -> None:
        """Stop and start again on the same port: empty image cache, uuid table and KV prefixes."""
        self._run(self._server.stop())
        port = int(self.url.rsplit(":", 1)[1])
        self._server = replace(self._config, port=port).build()
        assert self._run(self._server.start()) == self.url

    def close(self) -> None:
        self._run(self._server.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def metrics(self) -> dict[str, float]:
        """The server's ``vlrl:`` counters, by their short names."""
        with urllib.request.urlopen(self.url + "/metrics") as response:
            metrics = parse_metrics(response.read().decode())
        return {name.removeprefix("vlrl:"): value for name, value in metrics.items()}

    def post(self, path: str, body: Any, *, api_key: str | None = None, raw: bytes | None = None) -> tuple[int, Any]:
        """POST JSON (or ``raw`` bytes); return the status and the decoded answer, errors included."""
        headers = {"Content-Type": "application/json"}
        if api_key is not None:
            headers["Authorization"] = f"Bearer {api_key}"
        data = raw if raw is not None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=120)
