"""A scripted policy for ``counter_agent.py``: vlrl serves it to the program for the warm start
(``ProgramTeacher(script="examples/agents/counter_teacher.py:teacher")``)."""

from counter_agent import ACTION, BUTTON_H, BUTTON_W, Counter


def teacher(messages, seed, task):
    """Click the button that moves NOW toward GOAL, at its centre rounded to 7 px (the tiny
    model's tokenizer writes multiples of 7 as one token each)."""
    game = Counter(seed)
    for message in messages:  # replay the clicks of the conversation so far
        if message["role"] == "assistant" and (match := ACTION.search(message["content"])):
            game.click(int(match[1]), int(match[2]))
    left, top = game.buttons["+" if game.goal > game.now else "-"]
    return f"click({7 * round((left + BUTTON_W / 2) / 7)}, {7 * round((top + BUTTON_H / 2) / 7)})"
