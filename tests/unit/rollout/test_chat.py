"""Chat prompts: the templates' system turns, and an unknown template named with the known ones."""

from __future__ import annotations

import pytest

from vlrl.mm import patch_rule_of
from vlrl.rollout.chat import ChatFormat, ChatTurn
from vlrl.rollout.parsers import PARSERS


def _ids(processor, template: str) -> list[int]:
    chat = ChatFormat(processor.tokenizer, patch_rule_of(processor), template, PARSERS["qwen25vl"].describe())
    return chat.context([ChatTurn("Click OK.", (160, 120))]).ids


def test_the_short_template_drops_the_grammar(processor):
    full, short = _ids(processor, "gui-agent"), _ids(processor, "gui-agent-short")
    text = processor.tokenizer.decode(short)
    assert "You are a GUI agent. Answer with one action." in text and "Click OK." in text
    assert PARSERS["qwen25vl"].describe()[:40] not in text
    assert len(short) < len(full) / 2


def test_an_unknown_template_is_named(processor):
    with pytest.raises(ValueError, match=r"prompt template 'chatty' is unknown; expected one of \['gui-agent', 'gui-agent-short'\]"):
        _ids(processor, "chatty")
