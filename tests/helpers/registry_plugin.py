"""A plug-in module that only ``tests/unit/test_registry.py`` names by path: importing it is observable."""


def make_widget(*, size: int = 1) -> dict:
    return {"widget": size}


NOT_CALLABLE = 3
