"""Model side: Agent Loop, inference client, engines, action parsers."""
