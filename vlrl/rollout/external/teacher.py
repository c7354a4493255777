"""A teacher for an agent program's warm start: who answers the program's chat requests while
its demonstrations are traced (``WarmStart.teacher``, ``job.demos.ProgramDemo``).

The program plays as it does in RL, against the same traced endpoint; only the replies come from
the teacher instead of the policy: a scripted policy of the user's own (``script``: a Python
function given the request's messages) or any OpenAI-compatible endpoint (``url``). Each reply
is tokenized as the policy would have had to write it (its ids, then the end-of-turn token), so
the trace is a training sequence in the program's own prompts, history handling and format, with
the loss on the teacher's replies.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.util
import json
import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

from vlrl.config import ConfigError, Gt

_SCRIPT = re.compile(r"(?P<where>[^:]+):(?P<function>\w+)")


Replies = Callable[[dict[str, Any], list[Any]], Awaitable[str]]
"""Who answers a request in place of the policy: its body (as the program sent it) and its
images (``ContextImage``, pixels and content hash) -> the reply's text."""


class TeacherFailed(RuntimeError):
    """The teacher gave no usable reply; the message says why."""


@dataclass(kw_only=True, slots=True)
class ProgramTeacher:
    """Answers an agent program's requests during its warm start: ``script`` or ``url``, one of the two."""

    script: str = ""
    """``path/to/teacher.py:function`` (or ``module:function``), called in the loop host as
    ``function(messages, seed=..., task=...)`` with the request's messages as the program sent
    them (OpenAI's dicts; images as the program's URLs) and the episode; returns the reply text."""

    url: str = ""
    """Instead of ``script``: an OpenAI-compatible endpoint's base URL (``http://host:port/v1``);
    each request is forwarded to it as the program sent it, with ``model``."""

    model: str = ""
    """The model name sent to ``url`` ('': the one the program asked for)."""

    api_key_env: str = ""
    """The environment variable holding ``url``'s API key ('': no key is sent)."""

    timeout_s: Annotated[float, Gt(0)] = 120.0
    """Seconds one reply may take."""

    def check(self) -> None:
        if bool(self.script) == bool(self.url):
            raise ConfigError(
                "script", self.script or None,
                "'path/to/teacher.py:function' (a scripted policy), or else url='http://host:port/v1' (one of the two)",
            )  # fmt: skip
        if self.script and not _SCRIPT.fullmatch(self.script):
            raise ConfigError("script", self.script, "'path/to/teacher.py:function' or 'module:function'")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ConfigError("url", self.url, "an http(s) base URL such as 'http://127.0.0.1:8000/v1'")

    def located(self) -> ProgramTeacher:
        """This teacher with a script file's path made absolute (loop hosts may run elsewhere)."""
        match = _SCRIPT.fullmatch(self.script)
        if match is None or not match["where"].endswith(".py"):
            return self
        return replace(self, script=f"{Path(match['where']).resolve()}:{match['function']}")


@functools.lru_cache(maxsize=16)
def load_script(script: str) -> Callable[..., Any]:
    """The function ``script`` names, loaded once per process; a ``ConfigError`` on
    ``warm_start.teacher.script`` otherwise."""
    match = _SCRIPT.fullmatch(script)
    if match is None:
        raise ConfigError("warm_start.teacher.script", script, "'path/to/teacher.py:function' or 'module:function'")
    where, name = match["where"], match["function"]
    try:
        if where.endswith(".py"):  # loaded as ``python teacher.py`` would: its folder on sys.path
            spec = importlib.util.spec_from_file_location(f"vlrl_teacher_{Path(where).stem}", where)
            if spec is None or spec.loader is None or not Path(where).is_file():
                raise FileNotFoundError(f"no file {where}")
            if str(Path(where).resolve().parent) not in sys.path:
                sys.path.insert(0, str(Path(where).resolve().parent))
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except Exception as error:
        raise ConfigError(
            "warm_start.teacher.script", script, "a file or module that imports", hint=f"{type(error).__name__}: {error}"
        ) from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ConfigError("warm_start.teacher.script", script, f"a function named {name!r} in {where}")
    return function


def check_reachable(teacher: ProgramTeacher) -> None:
    """A ``url`` teacher answers ``GET /models`` (before anything expensive starts); a
    ``script`` teacher's function loads."""
    if teacher.script:
        load_script(teacher.located().script)
        return
    request = urllib.request.Request(f"{teacher.url.rstrip('/')}/models", headers=_headers(teacher))
    try:
        with urllib.request.urlopen(request, timeout=min(teacher.timeout_s, 10.0)) as response:
            json.loads(response.read())
    except (OSError, ValueError) as error:
        raise ConfigError(
            "warm_start.teacher.url", teacher.url, "an OpenAI-compatible endpoint that answers GET /models",
            hint=f"{type(error).__name__}: {error}",
        ) from None  # fmt: skip


class TeacherReplies:
    """The replies of one episode's teacher: ``await replies(body, images)`` is the text answering
    one request body (a dict, as the program sent it)."""

    def __init__(self, teacher: ProgramTeacher, *, seed: int, task: str) -> None:
        self.teacher, self.seed, self.task = teacher, seed, task
        self._function = load_script(teacher.script) if teacher.script else None

    async def __call__(self, body: dict[str, Any], images: Any = ()) -> str:
        if self._function is not None:
            call = asyncio.to_thread(self._function, body["messages"], seed=self.seed, task=self.task)
            text = await asyncio.wait_for(call, self.teacher.timeout_s)
        else:
            text = await asyncio.to_thread(self._ask, body)
        if not isinstance(text, str):
            raise TeacherFailed(f"warm_start.teacher returned {type(text).__name__} {text!r:.80}, not the reply's text")
        return text

    def _ask(self, body: dict[str, Any]) -> str:
        sent = {**body, **({"model": self.teacher.model} if self.teacher.model else {})}
        request = urllib.request.Request(
            f"{self.teacher.url.rstrip('/')}/chat/completions",
            data=json.dumps(sent).encode(),
            headers={"Content-Type": "application/json", **_headers(self.teacher)},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.teacher.timeout_s) as response:
                answer = json.loads(response.read())
            return answer["choices"][0]["message"]["content"] or ""
        except urllib.error.HTTPError as error:
            raise TeacherFailed(f"{self.teacher.url} answered {error.code}: {error.read()[:200]!r}") from None
        except (OSError, ValueError, KeyError, IndexError, TypeError) as error:
            raise TeacherFailed(f"{self.teacher.url}: {type(error).__name__}: {error}") from None


def _headers(teacher: ProgramTeacher) -> dict[str, str]:
    key = os.environ.get(teacher.api_key_env, "") if teacher.api_key_env else ""
    return {"Authorization": f"Bearer {key}"} if key else {}
