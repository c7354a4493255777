"""Whatever text reaches a parser, the outcome is an Action that fits the screen or a ParseError:
no other exception, no hang, and nothing in the text is ever executed."""

from __future__ import annotations

import builtins
import gc
import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlrl.harness import Action
from vlrl.rollout.parsers import MAX_OUTPUT_CHARS, PARSERS, ParseError, ScreenMap

SCREEN = ScreenMap(1280, 720, 644, 364)
FORMATS = sorted(PARSERS)
PARSE_CPU_S = 0.5
"""CPU seconds of this thread one parse may take (a linear parse of the longest reply takes
milliseconds; a backtracking blow-up takes far longer). CPU time, not wall time: what else runs on
the machine does not count, so the bound holds on a loaded machine too."""
FUZZ = settings(max_examples=120, deadline=None)  # check() bounds each parse's CPU time instead


class Executed(BaseException):
    """Raised by every patched way to run code; a BaseException so no parser can swallow it."""


@contextmanager
def nothing_runs() -> Iterator[None]:
    """While a parser works, make eval/exec/compile/import/open and process spawning raise."""
    targets = [(builtins, name) for name in ("eval", "exec", "compile", "__import__", "open", "breakpoint")] + [
        (os, "system"),
        (os, "popen"),
        (subprocess, "Popen"),
        (subprocess, "run"),
    ]
    saved = [(module, name, getattr(module, name)) for module, name in targets]

    def refuse(*args, **kwargs):
        raise Executed(f"a parser tried to execute something: {args!r:.80}")

    for module, name in targets:
        setattr(module, name, refuse)
    try:
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


@contextmanager
def no_collections() -> Iterator[None]:
    """The garbage collector off: a full collection of the test process's heap (half a CPU second
    in a worker that had loaded models) would count against the parse it happened to fall in."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def check(fmt: str, text: str) -> Action | None:
    """Parse under ``nothing_runs`` within ``PARSE_CPU_S``; only an in-bounds Action or a short
    ParseError may come out."""
    with nothing_runs(), no_collections():
        started = time.thread_time()
        try:
            action = PARSERS[fmt].parse(text, SCREEN)
        except ParseError as err:
            assert isinstance(err.feedback, str) and 0 < len(err.feedback) <= 600, err.feedback
            return None
        finally:
            spent = time.thread_time() - started
            assert spent < PARSE_CPU_S, f"{fmt} took {spent:.2f} CPU s on {text[:40]!r}"
    assert isinstance(action, Action)
    action.check_bounds(SCREEN.screen_width, SCREEN.screen_height)
    return action


VALID = {
    "qwen25vl": [
        '<tool_call>\n{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [320, 180]}}\n'
        "</tool_call>",
        'Action: drag.\n<tool_call>{"name": "computer_use", "arguments": {"action": "left_click_drag", '
        '"start_coordinate": [1, 2], "coordinate": [30, 40]}}</tool_call>',
        '<tool_call>{"name": "computer_use", "arguments": {"action": "type", "text": "hi \\"there\\"\\n"}}</tool_call>',
        '<tool_call>{"name": "computer_use", "arguments": {"action": "key", "keys": ["ctrl", "s"]}}</tool_call>',
        '<tool_call>{"name": "computer_use", "arguments": {"action": "scroll", "pixels": -3, "coordinate": [5, 6]}}'
        "</tool_call>",
    ],
    "uitars": [
        "Thought: click OK.\nAction: click(point='<point>320 180</point>')",
        "Action: click(start_box='<|box_start|>(320,180)<|box_end|>')",
        "Action: drag(start_point='<point>1 2</point>', end_point='<point>30 40</point>')",
        "Action: type(content='it\\'s \\n')",
        "Action: hotkey(key='ctrl c')",
        "Action: scroll(point='<point>5 6</point>', direction='down')",
        "Action: finished(content='42')",
    ],
    "pyautogui": [
        "pyautogui.click(320, 180)",
        "pyautogui.moveTo(1, 2); pyautogui.dragTo(30, 40)",
        "```python\npyautogui.write('it\\'s')\n```",
        "pyautogui.hotkey('ctrl', 'c')",
        "pyautogui.scroll(-3, x=5, y=6)",
        "DONE",
    ],
}
VALID["qwen3vl"] = VALID["qwen25vl"]

FRAGMENTS = [
    "'",
    '"',
    "(",
    ")",
    "((",
    "))",
    ",",
    "=",
    ";",
    ".",
    "\\",
    "\n",
    " ",
    "```",
    "```python\n",
    "#",
    "<point>",
    "</point>",
    "<|box_start|>",
    "<|box_end|>",
    "<tool_call>",
    "</tool_call>",
    "</think>",
    "{",
    "}",
    "[",
    "]",
    ":",
    '"action"',
    '"coordinate"',
    "Action: ",
    "Thought: ",
    "NaN",
    "Infinity",
    "-Infinity",
    "nan",
    "inf",
    "1e999",
    "-1",
    "0",
    "999",
    "1000",
    "0.5",
    "9" * 25,
    "9" * 400,
    "True",
    "None",
    "__",
    "__import__('os')",
    "eval('1')",
    "exec('1')",
    "os.",
    "import os\n",
    "lambda: 0",
    "click(1, 2)",
    "pyautogui.click(1, 2)",
    "pyautogui.",
    "click(point=click())",
    "\x00",
    "\x1b[2J",
    "\u202e",
    "😀",
]
NUMBERS = ["-1", "1e999", "NaN", "Infinity", "9" * 25, "9" * 4400, "0.0000001", "1000000", "-0", "1.5.5", "0x10"]


def payloads(target: str) -> list[str]:
    """Replies that would create ``target`` if any part of them ran as code."""
    touch = f"__import__('os').system('touch {target}')"
    write = f"open('{target}', 'w').write('x')"
    return [
        touch,
        f'eval("{write}")',
        f'exec("{write}")',
        f"import os; os.system('touch {target}')",
        f"```python\nimport subprocess\nsubprocess.run(['touch', '{target}'])\n```",
        f"pyautogui.click({touch}, 1)",
        f"pyautogui.write({write})",
        f"pyautogui.click(1, 2)\n{write}",
        f"pyautogui.write('{touch}')",
        f"Action: type(content={touch})",
        f'Action: click(point=eval("{write}"))',
        f"Action: type(content='{touch}')",
        f"Thought: {touch}\nAction: wait()",
        f'<tool_call>{{"name": "computer_use", "arguments": {{"action": "type", "text": "{touch}"}}}}</tool_call>',
        f'<tool_call>{{"name": "{touch}", "arguments": {{}}}}</tool_call>',
        f'<tool_call>{{"name": "computer_use", "arguments": {{"action": "key", "keys": ["{write}"]}}}}</tool_call>',
    ]


@st.composite
def near_misses(draw: st.DrawFn, fmt: str) -> str:
    """A valid reply of ``fmt`` after one to three edits: cuts, insertions, deletions, bad numbers."""
    text = draw(st.sampled_from(VALID[fmt]))
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(text)))
        edit = draw(st.sampled_from(["truncate", "insert", "delete", "number"]))
        if edit == "truncate":
            text = text[:i]
        elif edit == "insert":
            text = text[:i] + draw(st.sampled_from(FRAGMENTS)) + text[i:]
        elif edit == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 6)) :]
        else:
            numbers = list(re.finditer(r"[0-9]+", text))
            if numbers:
                match = draw(st.sampled_from(numbers))
                text = text[: match.start()] + draw(st.sampled_from(NUMBERS)) + text[match.end() :]
    return text


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ
@given(text=st.text(max_size=300))
def test_random_unicode_gives_an_action_or_a_parse_error(fmt, text):
    check(fmt, text)


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ
@given(
    text=st.lists(
        st.sampled_from(FRAGMENTS + ["click", "type", "content=", "point=", "x=", "42", "'ok'"]), max_size=40
    ).map("".join)
)
def test_grammar_token_soup_gives_an_action_or_a_parse_error(fmt, text):
    check(fmt, text)


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ
@given(data=st.data())
def test_near_miss_replies_give_an_action_or_a_parse_error(fmt, data):
    check(fmt, data.draw(near_misses(fmt)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_valid_seeds_parse(fmt):
    for text in VALID[fmt]:
        assert check(fmt, text) is not None, text


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=40, deadline=None)  # check() bounds each parse's CPU time
@given(fragment=st.sampled_from(FRAGMENTS), data=st.data())
def test_replies_near_the_size_limit_parse_quickly(fmt, fragment, data):
    text = fragment * data.draw(st.integers(1, MAX_OUTPUT_CHARS // len(fragment)))
    check(fmt, data.draw(st.sampled_from(VALID[fmt])) + text)
    check(fmt, text)


@pytest.mark.parametrize("fmt", FORMATS)
def test_pathological_inputs_finish_fast(fmt):
    n = MAX_OUTPUT_CHARS
    for text in [
        "[" * n,
        "{" * n,
        '"' * n,
        "'" + "\\'" * (n // 2 - 1),
        "(" * n,
        "```\n" * (n // 4),
        "<tool_call>" * (n // 11),
        "Action:" * (n // 7),
        "pyautogui.click(" + "1," * (n // 2 - 9),
        "a." * (n // 2),
        "<point>" + " " * (n - 20) + "</point>",
        "9" * n,
        " " * n + "x",
    ]:
        check(fmt, text[:n])  # within PARSE_CPU_S


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("payloads") / "pwned")


@pytest.mark.parametrize("fmt", FORMATS)
def test_payloads_are_never_executed(fmt, target):
    for text in payloads(target):
        check(fmt, text)
    assert not os.path.exists(target)


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ
@given(data=st.data())
def test_payloads_spliced_into_replies_are_never_executed(fmt, target, data):
    text = data.draw(st.sampled_from(VALID[fmt]))
    i = data.draw(st.integers(0, len(text)))
    check(fmt, text[:i] + data.draw(st.sampled_from(payloads(target))) + text[i:])
    assert not os.path.exists(target)


def test_the_guard_itself_catches_execution():
    with pytest.raises(Executed), nothing_runs():
        eval("1")
